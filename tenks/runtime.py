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
    """Select oslo.service's threading backend; hide eventlet."""
    hide_eventlet()
    from oslo_service import backend
    if backend.get_backend_type() is None:
        backend.init_backend(backend.BackendType.THREADING)


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
