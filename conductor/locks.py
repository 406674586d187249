"""Who works on which cluster.

A conductor runs operations in threads, and an embedded ``tenks`` command
may share its state directory: a cluster is taken when a thread of this
process holds it, or another process holds its lock file. A lock taken
by one thread can be released by another (the one that ran the
operation).
"""

import os
import threading

import fasteners

from tenks import exceptions


class ClusterLocks:

    def __init__(self, lock_dir):
        self.lock_dir = lock_dir
        self._held = {}
        self._mutex = threading.Lock()

    def acquire(self, name):
        """Take cluster ``name`` or raise ClusterBusy at once."""
        with self._mutex:
            if name in self._held:
                raise exceptions.ClusterBusy(name=name)
            lock = fasteners.InterProcessLock(
                os.path.join(self.lock_dir, '%s.lock' % name))
            if not lock.acquire(blocking=False):
                raise exceptions.ClusterBusy(name=name)
            self._held[name] = lock

    def release(self, name):
        with self._mutex:
            self._held.pop(name).release()
