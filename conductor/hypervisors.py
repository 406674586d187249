"""The registry of hypervisors: the hostagents that registered, whether
they are up, and which may take new nodes."""

import datetime
import time

from oslo_log import log as logging

from tenks import exceptions

LOG = logging.getLogger(__name__)


def _seen(row):
    """When the hypervisor of ``row`` was last heard of (aware, UTC)."""
    return row.last_seen.replace(tzinfo=datetime.timezone.utc)


class HypervisorRegistry:

    def __init__(self, conf, bus, db):
        self.conf = conf
        self.bus = bus
        self.db = db

    def register_agent(self, host, facts):
        self.db.register_hypervisor(host, facts)

    def wait_for_registrations(self, since, timeout, poll=0.2):
        """Wait until every hostagent that was up when any was last
        heard of has registered after ``since`` (an aware UTC time), for
        at most ``timeout`` seconds; one down by then stays down."""
        rows = self.db.list_hypervisors()
        if not rows:
            return
        newest = max(_seen(row) for row in rows)
        expected = {row.host for row in rows if (
            newest - _seen(row)).total_seconds() <= (
                self.conf.conductor.agent_down_time)}
        deadline = time.monotonic() + timeout
        while True:
            heard = {row.host for row in self.db.list_hypervisors()
                     if _seen(row) > since}
            missing = expected - heard
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(poll)
        if missing:
            LOG.warning('Hostagents %s have not registered since this '
                        'conductor started: they count as down',
                        ', '.join(sorted(missing)))

    def hypervisor_state(self, row):
        age = (datetime.datetime.now(datetime.timezone.utc) - _seen(row))
        if age.total_seconds() > self.conf.conductor.agent_down_time:
            return 'down'
        if row.maintenance:
            return 'maintenance'
        return 'up' if row.enabled else 'disabled'

    def list_hypervisors(self):
        counts = {}
        for node in self.db.list_nodes():
            counts[node.hypervisor] = counts.get(node.hypervisor, 0) + 1
        return [dict(row.as_dict(), state=self.hypervisor_state(row),
                     nodes=counts.get(row.host, 0))
                for row in self.db.list_hypervisors()]

    def get_hypervisor(self, host):
        for hypervisor in self.list_hypervisors():
            if hypervisor['host'] == host:
                return hypervisor
        raise exceptions.HypervisorNotFound(host=host)

    def hypervisors(self):
        """The hosts a deploy inspects: those whose hostagent is up,
        enabled or not (the scheduler gives new nodes to enabled ones,
        and the nodes of a disabled one are still checked)."""
        if self.bus.embedded:
            return [self.conf.hostagent.host]
        hosts = [h['host'] for h in self.list_hypervisors()
                 if h['state'] != 'down']
        if not hosts:
            raise exceptions.NoValidHost(
                what='any node', reason='no hostagent is up')
        return hosts

    def delete_hypervisor(self, host):
        """Forget hypervisor ``host``: it must be down and host nothing."""
        hypervisor = self.get_hypervisor(host)
        reasons = []
        if hypervisor['state'] != 'down':
            reasons.append('its hostagent is %s (last heard of at %s)' % (
                hypervisor['state'], hypervisor['last_seen']))
        clusters = sorted({n.cluster for n in
                           self.db.list_nodes(hypervisor=host)}
                          | {r.cluster for r in
                             self.db.list_resources(hypervisor=host)})
        if clusters:
            reasons.append('it hosts resources of cluster(s) %s: tear '
                           'them down first' % ', '.join(clusters))
        if reasons:
            raise exceptions.HypervisorInUse(host=host,
                                             reason='; '.join(reasons))
        self.db.delete_hypervisor(host)
