"""Transactions that arrive together, committed together.

ovs-vswitchd reconfigures its bridges after every committed transaction
that changes them, and the userspace datapath does so port by port: a
port added or removed on its own costs more the more ports the bridge
holds, and a thousand nodes' ports made one transaction each cost
minutes. A hostagent makes many nodes' ports at once, on several
threads; a :class:`GroupCommit` lets those that wait while a transaction
is in flight go together in the next one.

Requests are atomic as before: a transaction that fails is made again
one request at a time, so a request fails only of its own commands, and
a request that is not held up by another is committed at once, alone.
"""

import threading


class _Request:

    def __init__(self, commands):
        self.commands = commands
        self.done = False
        self.error = None
        self.committed = None


class GroupCommit:
    """``commit(commands)`` runs one transaction of ``commands``, raises
    if it fails and returns what the caller may wait on (ovs-vswitchd
    applying it: waited for after :meth:`run` returns, while the next
    transaction goes); :meth:`run` is that, shared with whoever waits at
    the same time."""

    def __init__(self, commit):
        self._commit = commit
        self._pending = []
        self._pending_lock = threading.Lock()
        # Held by the thread committing; the others queue behind it.
        self._committing = threading.Lock()

    def run(self, commands):
        """Commit ``commands`` in one transaction, maybe with others';
        what that transaction's ``commit`` returned."""
        request = _Request(list(commands))
        with self._pending_lock:
            self._pending.append(request)
        with self._committing:
            if not request.done:
                # Everything queued meanwhile goes, this request with it.
                with self._pending_lock:
                    batch, self._pending = self._pending, []
                self._commit_batch(batch)
        if request.error is not None:
            raise request.error
        return request.committed

    def _commit_batch(self, batch):
        if len(batch) > 1:
            try:
                committed = self._commit([c for request in batch
                                          for c in request.commands])
            except Exception:
                pass  # made again one by one below: whose was it?
            else:
                for request in batch:
                    request.committed = committed
                    request.done = True
                return
        for request in batch:
            try:
                request.committed = self._commit(request.commands)
            except Exception as e:
                request.error = e
            request.done = True
