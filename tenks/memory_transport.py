"""kombu's in-memory transport, waking consumers instead of spinning.

oslo.messaging sets the memory transport's polling interval to zero to
make it fast, so every idle listener spins on an empty queue: the
embedded conductor and hostagent burned a whole core doing nothing, on
machines whose cores should run the VMs. Here a consumer sleeps until a
message is put (or its timeout passes), so messages still go through at
once and an idle bus costs next to nothing.

A listener's stop only sets a flag that its poll loop checks between
drains, so a consumer drains for at most WAIT_SLICE seconds at a time:
stopping the embedded services (at the end of every command) takes that
long, not the 50 ms oslo.messaging gives the memory transport. The
price: an idle embedded process uses about 1% of a core more.
"""

import socket
import threading
import time
from queue import Empty

from kombu import transport as kombu_transport
from kombu.transport import memory

WAIT_SLICE = 0.01

_arrived = threading.Condition()
_generation = 0


def _notify():
    global _generation
    with _arrived:
        _generation += 1
        _arrived.notify_all()


class Channel(memory.Channel):

    def _put(self, queue, message, **kwargs):
        super()._put(queue, message, **kwargs)
        _notify()

    def _put_fanout(self, exchange, message, routing_key=None, **kwargs):
        super()._put_fanout(exchange, message, routing_key, **kwargs)
        _notify()


class Transport(memory.Transport):

    Channel = Channel

    def drain_events(self, connection, timeout=None):
        deadline = time.monotonic() + min(
            WAIT_SLICE, WAIT_SLICE if timeout is None else timeout)
        while True:
            with _arrived:
                seen = _generation
            try:
                self.cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise socket.timeout() from None
                with _arrived:
                    if _generation == seen:
                        _arrived.wait(remaining)


def install():
    """Serve kombu's ``memory://`` URLs with this transport."""
    kombu_transport.TRANSPORT_ALIASES['memory'] = __name__ + ':Transport'
