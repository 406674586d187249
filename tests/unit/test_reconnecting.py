"""A server database that cannot be reached for a moment (a restart)
costs a read or write nothing: it is tried again on a new connection."""

import types

import pytest
import sqlalchemy as sa

from tenks.db import api as db_api

SERVER = types.SimpleNamespace(dialect=types.SimpleNamespace(
    name='postgresql'))
SQLITE = types.SimpleNamespace(dialect=types.SimpleNamespace(name='sqlite'))


def failing(*errors):
    """A call that raises ``errors`` in turn, then answers 'done'."""
    left = list(errors)
    calls = []

    def call():
        calls.append(1)
        if left:
            raise left.pop(0)
        return 'done'
    call.calls = calls
    return call


def dropped():
    return sa.exc.OperationalError('SELECT 1', {}, Exception(
        'server closed the connection unexpectedly'),
        connection_invalidated=True)


def test_a_dropped_connection_is_tried_again():
    call = failing(dropped(), dropped())
    assert db_api.reconnecting(SERVER, call) == 'done'
    assert len(call.calls) == 3


def test_other_errors_are_not():
    call = failing(sa.exc.IntegrityError('INSERT', {}, Exception('dup')))
    with pytest.raises(sa.exc.IntegrityError):
        db_api.reconnecting(SERVER, call)
    assert len(call.calls) == 1


def test_it_gives_up_after_the_timeout(monkeypatch):
    monkeypatch.setattr(db_api, 'RECONNECT_TIMEOUT', 0.5)
    call = failing(*[dropped() for _ in range(100)])
    with pytest.raises(sa.exc.OperationalError):
        db_api.reconnecting(SERVER, call)
    assert 1 < len(call.calls) < 100


def test_sqlite_is_not_retried():
    call = failing(dropped())
    with pytest.raises(sa.exc.OperationalError):
        db_api.reconnecting(SQLITE, call)
