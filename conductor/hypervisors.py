"""The registry of hypervisors: the hostagents that registered, whether
they are up, and which may take new nodes.

A registration is a cast anybody who may publish on the bus can send,
naming any host. A hypervisor that registers new, or after it was down,
is therefore ``unverified`` until its hostagent answers a request the
conductor casts to it (``server=<host>``: only a hostagent listening as
that host receives it); until then it is not inspected and takes no
node. The check is an ``inspect`` (any hostagent answers it), cast again
with each registration until an answer comes.
"""

import datetime
import functools
import threading
import time
import uuid

from oslo_log import log as logging

from tenks import exceptions
from tenks import resources
from tenks import rpc
from tenks import states

LOG = logging.getLogger(__name__)

# The inspect that checks a registration: it asks about no spec.
CHECK = {'physnet_mappings': {}, 'ipmi_address': None, 'ipmi_ports': [],
         'interfaces': [], 'owner': None}


def _seen(row):
    """When the hypervisor of ``row`` was last heard of (aware, UTC)."""
    return row.last_seen.replace(tzinfo=datetime.timezone.utc)


class HypervisorRegistry:

    def __init__(self, conf, bus, db, agents, aggregates=None):
        """``agents``: the conductor's conductor.agents.AgentClient;
        ``aggregates``: its conductor.aggregates.Aggregates, which say
        where each host is (see describe)."""
        self.conf = conf
        self.bus = bus
        self.db = db
        self.agents = agents
        self.aggregates = aggregates
        self._lock = threading.Lock()
        # host -> the request id of the check of its registration sent
        # last: one waiter per host, however often it registers.
        self._checks = {}

    def register_agent(self, host, facts):
        """Record a registration (or heartbeat) of ``host``, and check a
        hostagent answers as ``host`` unless one has since it came up
        (embedded, nothing else is on the bus: no check)."""
        row = self.db.get_hypervisor(host)
        came_up = row is None or self._down(row)
        self.db.register_hypervisor(host, facts, came_up)
        if not self.bus.embedded and (came_up or row.answered_at is None):
            self._check(host)

    def _check(self, host):
        """Cast the check to ``host``; its answer, when it comes, marks
        the host answered."""
        request_id = 'check/%s/%s' % (host, uuid.uuid4())
        with self._lock:
            previous = self._checks.get(host)
            if previous is not None:
                self.agents.waiters.discard(previous)
            future = self.agents.waiters.register(request_id)
            self._checks[host] = request_id
        future.add_done_callback(functools.partial(self._answered, host))
        try:
            self.agents.api.cast(
                host, 'inspect', request_id, self.agents.conductor_host,
                deadline=time.time() + self.agents.timeout, **CHECK)
        except Exception as e:
            self.agents.waiters.discard(request_id)
            LOG.warning('Could not check the registration of %s: %s', host,
                        rpc.undelivered(e, host)
                        if isinstance(e, rpc.UNDELIVERED) else e)

    def _answered(self, host, future):
        # An error is an answer too: a hostagent received the check.
        self.db.hypervisor_answered(host)
        LOG.info('Hostagent %s answered: it may take nodes', host)

    def _down(self, row):
        age = datetime.datetime.now(datetime.timezone.utc) - _seen(row)
        return age.total_seconds() > self.conf.conductor.agent_down_time

    def wait_for_registrations(self, since, timeout, poll=0.2):
        """Wait until every hostagent that was up when any was last
        heard of has registered after ``since`` (an aware UTC time) and
        answered, for at most ``timeout`` seconds; one down by then stays
        down."""
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
                     if _seen(row) > since and row.answered_at is not None}
            missing = expected - heard
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(poll)
        if missing:
            LOG.warning('Hostagents %s have not registered since this '
                        'conductor started: they count as down',
                        ', '.join(sorted(missing)))

    def hypervisor_state(self, row):
        if self._down(row):
            return states.HYPERVISOR_DOWN
        if row.answered_at is None and not self.bus.embedded:
            return states.HYPERVISOR_UNVERIFIED
        if row.maintenance:
            return states.HYPERVISOR_MAINTENANCE
        return (states.HYPERVISOR_UP if row.enabled
                else states.HYPERVISOR_DISABLED)

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

    def describe(self, host):
        """Hypervisor ``host`` with its resource provider view
        (inventories, usages, traits, each node's allocations), its
        aggregates and zone."""
        hypervisor = self.get_hypervisor(host)
        nodes = [n.as_dict() for n in self.db.list_nodes(hypervisor=host)]
        where = self.aggregates.host_views().get(host, {})
        return dict(hypervisor, **resources.provider(hypervisor['facts'],
                                                     nodes),
                    aggregates=[a['name'] for a in where.get('aggregates',
                                                             ())],
                    availability_zone=where.get('availability_zone'))

    def update_hypervisor(self, host, enabled, reason=None):
        """Enable or disable ``host`` (a disabled one takes no new
        node); returns it described."""
        self.get_hypervisor(host)
        if not isinstance(enabled, bool):
            raise exceptions.HypervisorInvalid(
                host=host, reason='enabled must be true or false, not %r'
                                  % (enabled,))
        if enabled and reason:
            raise exceptions.HypervisorInvalid(
                host=host, reason='a reason is for disabling it')
        self.db.set_hypervisor_enabled(host, enabled, reason)
        return self.describe(host)

    def hypervisors(self):
        """The hosts a deploy inspects: those whose hostagent is up,
        enabled or not (the scheduler gives new nodes to enabled ones,
        and the nodes of a disabled one are still checked)."""
        if self.bus.embedded:
            return [self.conf.hostagent.host]
        listed = self.list_hypervisors()
        hosts = [h['host'] for h in listed
                 if h['state'] not in (states.HYPERVISOR_DOWN,
                                       states.HYPERVISOR_UNVERIFIED)]
        if not hosts:
            unverified = [h['host'] for h in listed
                          if h['state'] == states.HYPERVISOR_UNVERIFIED]
            raise exceptions.NoValidHost(
                what='any node', reason='no hostagent is up' + (
                    '; %s registered but never answered a request the '
                    'conductor sent: a hypervisor takes nodes once its '
                    'hostagent answers as it (is it running, on this '
                    'bus?)' % ', '.join(unverified) if unverified else ''))
        return hosts

    def delete_hypervisor(self, host):
        """Forget hypervisor ``host``: it must be down and host nothing."""
        hypervisor = self.get_hypervisor(host)
        reasons = []
        if hypervisor['state'] != states.HYPERVISOR_DOWN:
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
