"""tenks.daemon.stop: a service's stop, then its bus's, bounded in time."""

import threading
import time

from tenks import daemon


class Service:

    def __init__(self, stop):
        self._stop = stop

    def stop(self):
        return self._stop()


class Bus:

    def __init__(self):
        self.closed = False

    def cleanup(self):
        self.closed = True


def test_a_service_that_stops_has_its_bus_closed():
    bus = Bus()
    assert daemon.stop(Service(lambda: 0), bus, 5) == daemon.STOPPED
    assert bus.closed


def test_work_left_running_is_said_and_the_bus_left_to_the_exit():
    bus = Bus()
    assert daemon.stop(Service(lambda: 2), bus, 5) == daemon.LEFT_RUNNING
    assert not bus.closed


def test_a_stop_that_raises_is_a_failure():
    def fails():
        raise RuntimeError('listener gone')

    bus = Bus()
    assert daemon.stop(Service(fails), bus, 5) == daemon.FAILED
    assert not bus.closed


def test_a_stop_that_hangs_returns_after_the_limit():
    release = threading.Event()
    bus = Bus()
    started = time.monotonic()
    try:
        assert daemon.stop(Service(release.wait), bus, 0.3) is None
        assert 0.3 <= time.monotonic() - started < 5
    finally:
        release.set()
