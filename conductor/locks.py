"""Who works on which cluster.

A conductor runs operations in threads, and an embedded ``tenks`` command
may share its state directory: a cluster is taken when a thread of this
process holds it, or another process holds its lock file. Conductors
that share a jobboard lock clusters in tooz instead, where the lock of a
conductor that dies goes when its session expires. A lock taken by one
thread can be released by another (the one that ran the operation).
"""

import os
import threading

import fasteners

from tenks import exceptions


def lock_files(lock_dir):
    """Locks of clusters: files in ``lock_dir``."""
    return lambda name: fasteners.InterProcessLock(
        os.path.join(lock_dir, '%s.lock' % name))


def shared(coordination):
    """Locks of clusters in tooz (conductor.jobboard.Coordination)."""
    return lambda name: coordination.lock('cluster.%s' % name)


class ClusterLocks:

    def __init__(self, make_lock):
        """``make_lock(name)``: the lock of cluster ``name`` (see
        lock_files and shared)."""
        self.make_lock = make_lock
        self._held = {}
        self._mutex = threading.Lock()

    def acquire(self, name):
        """Take cluster ``name`` or raise ClusterBusy at once."""
        with self._mutex:
            if name in self._held:
                raise exceptions.ClusterBusy(name=name)
            lock = self.make_lock(name)
            if not lock.acquire(blocking=False):
                raise exceptions.ClusterBusy(name=name)
            self._held[name] = lock

    def release(self, name):
        with self._mutex:
            self._held.pop(name).release()
