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


def marked(pid, marker):
    """Whether process ``pid`` lives with ``marker`` (bytes,
    ``NAME=value``) in its environment."""
    try:
        with open('/proc/%d/environ' % pid, 'rb') as f:
            return marker in f.read().split(b'\0') and alive(pid)
    except OSError:
        return False


def marked_pids(marker):
    """Live processes whose environment holds ``marker``, never this
    one."""
    return {int(pid) for pid in os.listdir('/proc')
            if pid.isdigit() and int(pid) != os.getpid()
            and marked(int(pid), marker)}
