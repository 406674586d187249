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
# The progress of the flows this process runs, by operation id (see
# reporting).
_reports = {}


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


@contextlib.contextmanager
def reporting(operation_id, report):
    """Within the block, ``report`` (with a method ``step(atom name,
    count)``) hears of the steps the tasks of operation
    ``operation_id`` do before they end (see step)."""
    _reports[operation_id] = report
    try:
        yield
    finally:
        _reports.pop(operation_id, None)


def step(operation_id, atom_name, count=1):
    """Tell the progress of operation ``operation_id`` that its task
    ``atom_name`` did ``count`` more of its steps (a node of a batch):
    a big cluster's batches all run at once and end together, so their
    ends alone said nothing until the last moments. Nothing when the
    operation's flow is not running here (a task run on its own)."""
    report = _reports.get(operation_id)
    if report is not None:
        report.step(atom_name, count)
