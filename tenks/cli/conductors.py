"""``tenks conductor list``."""

from tenks.cli import client
from tenks.cli import columns
from tenks.cli.base import Lister

CONDUCTOR_COLUMNS = ('host', 'started_at', 'heartbeat_at', 'jobs')


class ConductorList(Lister):
    """List the live conductors: when each started, its last heartbeat,
    and the operations it runs (with a jobboard, every conductor that
    shares it; else the one that answers)."""

    def take_action(self, args):
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            conductors = tenks.list_conductors()
        return CONDUCTOR_COLUMNS, [
            (c['host'], c['started_at'], c['heartbeat_at'],
             columns.ListColumn(c['jobs'])) for c in conductors]
