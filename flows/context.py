"""The live clients flow tasks use: state database, hostagents, events
and the OpenStack cloud.

Tasks are rebuilt from their persisted flow on resume, so they hold no
clients of their own; the process that runs the flows (the conductor)
installs these once.
"""

import dataclasses

_installed = None


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
    if _installed is None:
        raise RuntimeError('No conductor services installed in this process')
    return _installed
