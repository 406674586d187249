"""Worker threads of futurist's pools (oslo.messaging's RPC servers run
requests on them) stop at once, whatever their wait for work."""

import threading
import time

import futurist
from futurist import _thread

from tenks import runtime

runtime.use_threads()


def _shut_down_within(executor, seconds, wait=True):
    """Whether ``executor.shutdown(wait)`` returned within ``seconds``."""
    stopper = threading.Thread(target=executor.shutdown, args=(wait,),
                               daemon=True)
    stopper.start()
    stopper.join(seconds)
    return not stopper.is_alive()


def test_idle_workers_stop_without_waiting_out_their_poll(monkeypatch):
    # A wait for work longer than the test waits: only the wake-up
    # ends it in time.
    monkeypatch.setattr(_thread.ThreadWorker, 'MAX_IDLE_FOR', 20)
    executor = futurist.ThreadPoolExecutor(max_workers=8)
    futures = [executor.submit(time.sleep, 0.01) for _ in range(8)]
    for future in futures:
        future.result(10)
    workers = list(executor._workers)
    assert len(workers) == 8
    assert _shut_down_within(executor, 5)
    assert not any(worker.is_alive() for worker in workers)


def test_queued_work_still_runs_before_the_workers_stop(monkeypatch):
    monkeypatch.setattr(_thread.ThreadWorker, 'MAX_IDLE_FOR', 20)
    executor = futurist.ThreadPoolExecutor(max_workers=4)
    started = threading.Event()
    release = threading.Event()

    def first():
        started.set()
        release.wait(10)
        return 'first'

    futures = [executor.submit(first)]
    started.wait(10)
    futures += [executor.submit(lambda n=n: n) for n in range(20)]
    release.set()
    assert _shut_down_within(executor, 5)
    assert [f.result(0) for f in futures] == ['first'] + list(range(20))


def test_a_stop_without_wait_leaves_busy_workers_to_finish(monkeypatch):
    monkeypatch.setattr(_thread.ThreadWorker, 'MAX_IDLE_FOR', 20)
    executor = futurist.ThreadPoolExecutor(max_workers=2)
    release = threading.Event()
    busy = executor.submit(release.wait, 10)
    idle = executor.submit(lambda: None)
    idle.result(10)
    assert _shut_down_within(executor, 5, wait=False)
    assert not busy.done()
    release.set()
    assert busy.result(10) is True
    for worker in executor._workers:
        worker.join(10)
        assert not worker.is_alive()


def test_the_wake_up_is_installed_once():
    stop = _thread.ThreadWorker.stop
    runtime.use_threads()
    assert _thread.ThreadWorker.stop is stop
