"""kombu's in-memory transport, waking consumers instead of spinning.

oslo.messaging sets the memory transport's polling interval to zero to
make it fast, so every idle listener spins on an empty queue: the
embedded conductor and hostagent burned a whole core doing nothing, on
machines whose cores should run the VMs. Here a consumer sleeps until a
message is put on a queue it consumes (or its timeout passes): messages
still go through at once, an idle bus costs next to nothing, and a
message wakes its consumers only (it woke every listener of the process).

A listener's stop only sets a flag that its poll loop checks between
drains, which oslo.messaging makes 50 ms long on this transport. While
:func:`stopping` runs, drains last STOP_SLICE at most, so the embedded
services stop at once; the rest of the time an idle listener wakes 20
times a second, not the 100 times of a 10 ms drain.
"""

import collections
import contextlib
import socket
import threading
import time
from queue import Empty

from kombu import transport as kombu_transport
from kombu.transport import memory

# How long a drain given no timeout waits.
IDLE_WAIT = 1.0
STOP_SLICE = 0.005

_lock = threading.Lock()
# Queue name: the transports draining it.
_draining = collections.defaultdict(set)
_stopping = 0


def _wake(queues):
    with _lock:
        for queue in queues:
            for transport in _draining.get(queue, ()):
                transport.wake()


@contextlib.contextmanager
def stopping():
    """While listeners of this bus stop: their drains end at once, and
    then every STOP_SLICE, so that each sees its stop flag."""
    global _stopping
    with _lock:
        _stopping += 1
        for transports in _draining.values():
            for transport in transports:
                transport.wake()
    try:
        yield
    finally:
        with _lock:
            _stopping -= 1


class Channel(memory.Channel):

    def _put(self, queue, message, **kwargs):
        super()._put(queue, message, **kwargs)
        _wake([queue])

    def _put_fanout(self, exchange, message, routing_key=None, **kwargs):
        super()._put_fanout(exchange, message, routing_key, **kwargs)
        _wake(self._lookup(exchange, routing_key))


class Transport(memory.Transport):

    Channel = Channel

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._arrived = threading.Condition(_lock)
        self._generation = 0

    def wake(self):
        """A message arrived (or a stop began); called holding _lock."""
        self._generation += 1
        self._arrived.notify_all()

    def drain_events(self, connection, timeout=None):
        deadline = time.monotonic() + (
            IDLE_WAIT if timeout is None else timeout)
        queues = {queue for channel in self.channels
                  for queue in channel._active_queues}
        with _lock:
            for queue in queues:
                _draining[queue].add(self)
            seen = self._generation
        try:
            while True:
                try:
                    self.cycle.get(self._deliver, timeout=timeout)
                    return
                except Empty:
                    pass
                with _lock:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise socket.timeout()
                    if self._generation == seen:
                        self._arrived.wait(min(remaining, STOP_SLICE)
                                           if _stopping else remaining)
                    if _stopping:
                        raise socket.timeout()
                    seen = self._generation
        finally:
            with _lock:
                for queue in queues:
                    _draining[queue].discard(self)
                    if not _draining[queue]:
                        del _draining[queue]


def install():
    """Serve kombu's ``memory://`` URLs with this transport."""
    kombu_transport.TRANSPORT_ALIASES['memory'] = __name__ + ':Transport'
