"""Files and directories that may hold secrets (BMC passwords)."""

import contextlib
import fcntl
import os
import stat


def private_dir(path, fix_existing=True):
    """Make directory ``path`` mode 0700, with any missing parent.

    ``os.makedirs`` would give the parents the umask's mode (0755 with
    the usual 022). An existing ``path`` is set to 0700 too, unless
    ``fix_existing`` is false (a directory the operator chose).
    """
    missing = []
    head = os.path.abspath(path)
    while not os.path.isdir(head):
        missing.append(head)
        head = os.path.dirname(head)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass  # another process made it at the same moment
        _chmod(directory, 0o700)
    if fix_existing:
        _chmod(path, 0o700)
    return path


@contextlib.contextmanager
def flocked(path):
    """Hold the lock of lock file ``path`` (made 0600 when missing)
    against other processes."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def private_file(path):
    """Create file ``path`` mode 0600 unless it exists; set it to 0600."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return path


def _chmod(path, mode):
    # Only when needed: a right mode on another user's file is no error.
    if stat.S_IMODE(os.stat(path).st_mode) != mode:
        os.chmod(path, mode)
