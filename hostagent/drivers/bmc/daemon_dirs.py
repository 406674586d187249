"""A daemon directory per owner: where a BMC driver keeps each daemon it
runs for an owner (a cluster's deployment) on this hypervisor, the
Redfish emulators (hostagent.drivers.bmc.sushy) and the VirtualPDUs
(hostagent.drivers.bmc.virtualpdu).

Each lives in ``<root>/<cluster>-<hash of the owner>`` (mode 0700),
marked by its ``owner`` file, which names the owner. A directory without
that mark is not ours, and one marked for another owner is not this
one's: Tenks never adopts, changes or removes either. Every file is
0600 and replaced whole (write): a daemon reading it meanwhile sees the
old or the new one.
"""

import contextlib
import hashlib
import json
import os
import threading

from hostagent.drivers.bmc import fault_files
from tenks import exceptions
from tenks import fileutils

OWNER = 'owner'


class DaemonDirs:
    """The daemon directories under ``root``; ``kind`` names one in an
    owner conflict ('VirtualPDU directory')."""

    def __init__(self, root, kind):
        self.root = root
        self.kind = kind
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def locked(self):
        """Serialise among threads and processes (embedded mode may run
        another hostagent on the same state directory)."""
        with self._lock:
            fileutils.private_dir(self.root)
            with fileutils.flocked(os.path.join(self.root, 'lock')):
                yield

    def path(self, owner):
        """The directory of ``owner``'s daemon."""
        parts = owner.split(':')
        cluster = parts[1] if len(parts) == 3 else 'tenks'
        digest = hashlib.sha256(owner.encode()).hexdigest()[:12]
        return os.path.join(self.root, '%s-%s' % (cluster, digest))

    def marked(self):
        """The directories marked as ours, by any owner."""
        if not os.path.isdir(self.root):
            return []
        return sorted(
            os.path.join(self.root, name) for name in os.listdir(self.root)
            if os.path.isfile(os.path.join(self.root, name, OWNER)))

    @staticmethod
    def make(path, owner):
        """Make the directory ``path`` of ``owner``'s daemon."""
        os.makedirs(path, mode=0o700)
        write(os.path.join(path, OWNER), owner)

    def check_owner(self, path, owner):
        """ResourceConflict unless ``path`` is marked as ``owner``'s."""
        found = owner_of(path)
        if found != owner:
            raise exceptions.ResourceConflict(
                kind=self.kind, name=path, owner=owner,
                reason='its owner file says %r' % found)

    def set_fault(self, owner, domain, fault, check):
        """Store ``fault`` (None: none) for the BMC of ``domain`` where
        ``owner``'s daemon reads it (fault_files); whether that changed
        anything. ``check(path)``, called under the lock once the
        directory's owner is checked (or found absent), raises when the
        daemon cannot take that fault."""
        path = self.path(owner)
        if not os.path.isdir(path) and fault is None:
            return False
        with self.locked():
            if os.path.isdir(path):
                self.check_owner(path, owner)
            check(path)
            return fault_files.write(path, domain, fault)


def owner_of(path):
    """The owner that daemon directory ``path`` is marked for, or
    None."""
    return read(os.path.join(path, OWNER))


def read(name):
    """The text of file ``name``, or None when there is none."""
    try:
        with open(name, encoding='utf-8') as f:
            return f.read()
    except FileNotFoundError:
        return None


def read_json(name):
    """What JSON file ``name`` holds, or None (none, or no JSON)."""
    text = read(name)
    try:
        return None if text is None else json.loads(text)
    except ValueError:
        return None


def write(name, data):
    """Replace file ``name`` with ``data`` (str or bytes), mode 0600,
    at once: the daemon may read it meanwhile."""
    tmp = name + '.tmp'
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, 'wb') as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, name)


def listdir(directory):
    """The names of the files of ``directory`` ([] when it is absent),
    but those write is writing."""
    try:
        return sorted(n for n in os.listdir(directory)
                      if not n.endswith('.tmp'))
    except FileNotFoundError:
        return []
