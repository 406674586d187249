"""Processes the BMC drivers start, and how they wait for them."""

import contextlib
import os
import time

POLL = 0.005  # s between checks while waiting


def poll(predicate, timeout, interval=POLL):
    """Whether ``predicate`` came true within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def alive(pid):
    """Whether any thread of the process is still more than a zombie.

    A leader thread turns zombie before the others exit, and the process
    keeps its sockets until the last one has.
    """
    task_dir = '/proc/%d/task' % pid
    with contextlib.suppress(OSError):
        for tid in os.listdir(task_dir):
            with contextlib.suppress(OSError):
                with open(os.path.join(task_dir, tid, 'stat')) as f:
                    if f.read().rpartition(')')[2].split()[0] not in 'ZX':
                        return True
    return False


def marked_pids(marker):
    """Live processes whose environment holds ``marker`` (bytes,
    ``NAME=value``), never this one."""
    pids = set()
    for pid in os.listdir('/proc'):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open('/proc/%s/environ' % pid, 'rb') as f:
                if marker in f.read().split(b'\0') and alive(int(pid)):
                    pids.add(int(pid))
        except OSError:
            pass
    return pids
