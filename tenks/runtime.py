"""Tenks runs on native threads, never on eventlet.

oslo.service (imported by oslo.messaging) picks its eventlet backend
unless told otherwise, and futurist imports eventlet whenever it is
installed: a quarter of a second of start-up and a deprecation warning
for a library Tenks never uses. :func:`use_threads` runs before either
is imported, in every Tenks process that uses the bus (the services,
rpc users); the CLI only hides eventlet, so that ``--version`` and the
read-only commands load no oslo.service.
"""

import os
import sys

# glibc's malloc for a service's many threads: two arenas and no
# per-thread caches (see tune_malloc).
MALLOC_TUNING = {'MALLOC_ARENA_MAX': '2',
                 'GLIBC_TUNABLES': 'glibc.malloc.tcache_count=0'}


def hide_eventlet():
    """Hide eventlet from the libraries that would import it only
    because it is installed (futurist); imports nothing."""
    if 'eventlet' not in sys.modules:
        sys.modules['eventlet'] = None


def use_threads():
    """Select oslo.service's threading backend; hide eventlet; stop idle
    worker threads at once."""
    hide_eventlet()
    from oslo_service import backend
    if backend.get_backend_type() is None:
        backend.init_backend(backend.BackendType.THREADING)
    _wake_stopped_workers()


def _wake_stopped_workers():
    """Make a stopped futurist worker that waits for work stop at once.

    oslo.messaging's RPC servers run requests on futurist thread pools,
    whose idle workers wait for work a second at a time and notice a stop
    only then: stopping a server, which joins its workers, took a second.
    Embedded mode used to shorten that wait to 10 ms instead, and its two
    servers' 128 idle workers then woke 12,800 times a second: a quarter
    of the CPU of a 1,000-node deploy, a third of a teardown's. Now a
    stopped worker is also handed an empty work item, which wakes it (a
    busy one exits after its work, as before, and leaves the item).
    """
    import futurist
    from futurist import _thread
    from futurist import _utils
    stop = _thread.ThreadWorker.stop
    if getattr(stop, 'wakes', False):
        return

    def stop_and_wake(worker):
        stop(worker)
        worker.work_queue.put(_utils.WorkItem(futurist.Future(), _nothing))

    stop_and_wake.wakes = True
    _thread.ThreadWorker.stop = stop_and_wake


def _nothing():
    pass


def tune_malloc():
    """Run this process again with MALLOC_TUNING in its environment,
    unless it has a malloc tuning already (the operator's, or ours).

    glibc reads these only as a process starts. Left to itself it gives
    a service's 70-80 threads their own arenas and caches, and what they
    free stays spread over them: RSS creeps up with every operation (10
    MiB over 400 failed deploys) while the Python heap stays flat. Tuned,
    RSS stays flat at the same speed (README: Memory of long-running
    services). Not glibc: nothing to do.
    """
    try:
        os.confstr('CS_GNU_LIBC_VERSION')
    except (ValueError, OSError):
        return
    if any(name in os.environ for name in MALLOC_TUNING):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv,
              dict(os.environ, **MALLOC_TUNING))
