"""The live clients flow tasks use: state database, hostagents, events
and the OpenStack cloud.

Tasks are rebuilt from their persisted flow on resume, so they hold no
clients of their own; the process that runs the flows (the conductor)
installs these once.
"""

import contextlib
import dataclasses
import threading

_installed = None
# Clients that replace the installed ones in one thread (see replaced).
_local = threading.local()


@dataclasses.dataclass
class Clients:
    db: object
    agents: object
    notifier: object
    cloud: object


def install(clients):
    global _installed
    _installed = clients


def get():
    clients = getattr(_local, 'clients', None) or _installed
    if clients is None:
        raise RuntimeError('No conductor services installed in this process')
    return clients


@contextlib.contextmanager
def replaced(**clients):
    """Within the block, get() in this thread returns the installed
    clients with ``clients`` instead (conductor.faults: a task whose
    answers are replaced)."""
    _local.clients = dataclasses.replace(get(), **clients)
    try:
        yield
    finally:
        _local.clients = None


@contextlib.contextmanager
def reading(db):
    """Within the block, get() in this thread returns the state database
    ``db`` and no other client: what a flow factory reads to build a
    flow that is drawn, not run (conductor.graphs)."""
    before = getattr(_local, 'clients', None)
    _local.clients = Clients(db=db, agents=None, notifier=None, cloud=None)
    try:
        yield
    finally:
        _local.clients = before
