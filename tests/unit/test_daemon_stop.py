"""tenks.daemon: a service's stop, then its bus's, bounded in time, and
the signals that start and cut it short."""

import os
import subprocess
import sys
import threading
import time

from tenks import daemon


class Service:

    def __init__(self, stop):
        self._stop = stop

    def stop(self):
        return self._stop()


class Bus:

    def __init__(self):
        self.closed = False

    def cleanup(self):
        self.closed = True


def test_a_service_that_stops_has_its_bus_closed():
    bus = Bus()
    assert daemon.stop(Service(lambda: 0), bus, 5,
                       daemon.Signals()) == daemon.STOPPED
    assert bus.closed


def test_work_left_running_is_said_and_the_bus_left_to_the_exit():
    bus = Bus()
    assert daemon.stop(Service(lambda: 2), bus, 5,
                       daemon.Signals()) == daemon.LEFT_RUNNING
    assert not bus.closed


def test_a_stop_that_raises_is_a_failure():
    def fails():
        raise RuntimeError('listener gone')

    bus = Bus()
    assert daemon.stop(Service(fails), bus, 5,
                       daemon.Signals()) == daemon.FAILED
    assert not bus.closed


def test_a_stop_that_hangs_returns_after_the_limit():
    release = threading.Event()
    bus = Bus()
    started = time.monotonic()
    try:
        assert daemon.stop(Service(release.wait), bus, 0.3,
                           daemon.Signals()) is None
        assert 0.3 <= time.monotonic() - started < 5
    finally:
        release.set()


# The main thread blocks SIGTERM after starting a thread that does not:
# the kernel must hand the signal to that thread, as it may do to any
# thread of a service (one that just unblocked signals, creating a thread).
SIGNALLED = """
import signal, sys, threading, time
from tenks import daemon

class Hangs:
    def stop(self):
        time.sleep(60)

signals = daemon.Signals()
signals.install()
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
print('waiting', flush=True)
print(signals.wait(30), flush=True)
print(daemon.stop(Hangs(), None, 30, signals), flush=True)
"""


def _started(script):
    process = subprocess.Popen(
        [sys.executable, '-c', script], stdout=subprocess.PIPE, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert process.stdout.readline() == 'waiting\n'
    return process


def test_a_signal_another_thread_takes_wakes_the_main_thread():
    """The first SIGTERM ends the wait, the second the stop, though
    neither reaches the main thread."""
    process = _started(SIGNALLED)
    try:
        started = time.monotonic()
        process.send_signal(daemon.signal.SIGTERM)
        assert process.stdout.readline() == '%d\n' % daemon.signal.SIGTERM
        process.send_signal(daemon.signal.SIGTERM)
        assert process.stdout.readline() == daemon.SIGNALLED + '\n'
        assert process.wait(10) == 0
        assert time.monotonic() - started < 10
    finally:
        process.kill()
        process.wait()


def test_a_stop_that_ends_wakes_its_wait():
    """No signal: the stop's end returns at once, not at the limit."""
    started = time.monotonic()
    assert daemon.stop(Service(lambda: time.sleep(0.2)), Bus(), 30,
                       daemon.Signals()) == daemon.STOPPED
    assert time.monotonic() - started < 5
