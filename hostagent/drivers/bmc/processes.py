"""Processes the BMC drivers start, and how they wait for them."""

import contextlib
import os
import signal
import subprocess
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


def spawn(command, log_file, name, directory, env=None):
    """Start ``command`` as the daemon of ``directory``, marked with
    ``name``=directory in its environment (``env`` added to ours), its
    output appended to ``log_file`` (0600); its Popen.

    A session of its own: it outlives the hostagent process and misses
    the signals sent to its process group.
    """
    log = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True, umask=0o077,
            env=dict(os.environ, **(env or {}), **{name: directory}))
    finally:
        os.close(log)


def mark(name, directory):
    """The environment entry (bytes) that marks the daemon of
    ``directory`` with ``name``."""
    return ('%s=%s' % (name, directory)).encode()


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


def marked_by(name):
    """{value: set of pids} of the live processes whose environment
    holds ``name``=value (the marks of Tenks' daemons), never this
    one."""
    prefix = ('%s=' % name).encode()
    found = {}
    for pid in os.listdir('/proc'):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open('/proc/%s/environ' % pid, 'rb') as f:
                entries = f.read().split(b'\0')
        except OSError:
            continue
        for entry in entries:
            if entry.startswith(prefix) and alive(int(pid)):
                found.setdefault(entry[len(prefix):].decode(
                    errors='replace'), set()).add(int(pid))
    return found


def read_pid(path):
    """The pid in file ``path``, or None."""
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def running(pid_file, marker):
    """The pid that ``pid_file`` names while that process lives with
    ``marker``, or None."""
    pid = read_pid(pid_file)
    return pid if pid is not None and marked(pid, marker) else None


def _parent(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            return int(f.read().rpartition(')')[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _descends(pid, ancestor):
    while pid > 1:
        if pid == ancestor:
            return True
        pid = _parent(pid)
    return False


def orphans(directory, pid_file, pids):
    """(those of ``pids``, the processes marked as serving
    ``directory``, that are neither the one its ``pid_file`` names nor
    a child of it; why) or (set(), None)."""
    if not os.path.isdir(directory):
        return set(pids), 'its directory %s is gone' % directory
    own = read_pid(os.path.join(directory, pid_file))
    others = {pid for pid in pids if not (own and _descends(pid, own))}
    if not others:
        return set(), None
    return others, '%s names %s' % (
        os.path.join(directory, pid_file),
        'another process' if own else 'none')


def daemons(kind, name, pid_file):
    """The daemons marked with ``name`` (its value: the directory each
    serves), of every state directory, as a BMC driver's daemons()
    lists them (hostagent.drivers.base): [{'kind', 'directory', 'pids',
    'orphan'}], ``pid_file`` naming each directory's own."""
    found = []
    for directory, pids in sorted(marked_by(name).items()):
        strays, why = orphans(directory, pid_file, pids)
        found.append({'kind': kind, 'directory': directory,
                      'pids': sorted(strays or pids), 'orphan': why})
    return found


def kill(pids, timeout, signals=(signal.SIGKILL,)):
    """Send each of ``signals`` in turn to ``pids`` until they are gone,
    waiting ``timeout`` s after each; whether they are."""
    for signum in signals:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        if poll(lambda: not any(map(alive, pids)), timeout):
            return True
    return False
