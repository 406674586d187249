"""Server side of the hostagent RPC API: runs requests on this hypervisor.

Each method runs one driver operation and casts its outcome back to the
conductor named in ``reply_to``: ``{'changed': bool, ...}`` (an
``ensure_*`` adds ``'created': bool``, see hostagent.drivers.base) or a
typed error. A request is run once per request id: a copy that arrives
while the first still runs (a retry after the conductor's
agent_timeout, a resumed operation) joins it, and one that arrives
later gets the kept outcome at once; each copy's ``reply_to`` hears the
outcome. An outcome the bus does not take (the broker down, or no queue
for that conductor: either restarting) is sent again every
rpc.RESEND_INTERVAL s until the request's deadline.

Requests that act on the same thing (kind and name: a volume of a pool,
a bridge, a domain's BMC, ...) run one at a time, in whatever order the
lock hands them out: a revert or a teardown that sends ``remove_x``
while ``ensure_x`` of the same thing still runs here (its conductor gave
up waiting) waits for it, then finds and removes what it made.

A whole-node request (API 1.2, hostagent.nodes) holds the node's lock
and those of each of its parts, so it and a single-thing request on one
of them wait for each other; requests of different nodes run side by
side, each in its own thread of the RPC server's executor.

``inspect_nodes`` (API 1.3) and ``audit`` (1.10) only read, and take
none of those locks: a node that another request changes meanwhile is
seen before or after (the drivers keep a single read of a volume or a
BMC whole). ``clean`` (1.10) takes the lock of each thing as it removes
it.

A request carries its operation and a deadline in its context (API
1.6): the time its conductor stops waiting for it. One whose deadline
has passed when it is about to run, its locks taken, is dropped unrun
and unreported, and no outcome is kept: a request of a failed or
rolled-back operation never acts later, when an agent that was stopped
comes back. A copy that joins a running request extends its deadline; a
request without one (an older conductor) runs whenever it comes.

An outcome is kept only while a copy of its request may still come from
the conductor that waits for it: until the request's deadline (one
without a deadline: KEEP_UNDATED seconds). A copy that comes later, from
a resumed operation, runs again; the conductor's record says what that
operation asked for, whatever the agent remembers. Outcomes of requests
that only read (inspections) are not kept: a copy reads afresh. So the
agent's memory follows the requests of the last few minutes, not every
request it ever ran.
"""

import collections
import contextlib
import os
import shutil
import socket
import threading
import time

import oslo_messaging as messaging
from oslo_log import log as logging
from stevedore import driver as stevedore_driver

from conductor import rpcapi as conductor_rpcapi
from hostagent import audit
from hostagent import deployments
from hostagent import nodes
from hostagent import rpcapi
from hostagent import transfer
from tenks import conf as tenks_conf
from tenks import constants
from tenks import exceptions
from tenks import names
from tenks import netutils
from tenks import policy
from tenks import resources
from tenks import rpc

LOG = logging.getLogger(__name__)

RPC_API_VERSION = rpcapi.RPC_API_VERSION
# Outcomes kept at most, whatever their deadlines say.
RECENT_RESULTS = 4096
# Seconds the outcome of a request without a deadline is kept: as long
# as a conductor with the default agent_timeout and agent_retries waits.
KEEP_UNDATED = 240


def load_driver(namespace, name, conf):
    return stevedore_driver.DriverManager(
        namespace, name, invoke_on_load=True, invoke_args=(conf,)).driver


# The kernel's route types (rtnetlink's RTN_*) of an address that is
# not one of this host's own unicast addresses.
ROUTE_TYPES = {3: 'a broadcast address', 5: 'a multicast address'}
LOOPBACK = '127.0.0.1'
RTN_LOCAL = 2


def address_problem(address):
    """Why ``address`` is not one of this host's own unicast addresses
    (a BMC listens on one, which Ironic dials), or None."""
    if address == LOOPBACK:
        # Always the host's own: no need to load pyroute2 (a tenth of a
        # second of a command) to ask. (Not all of 127.0.0.0/8:
        # 127.255.255.255 is a broadcast address.)
        return None
    from pyroute2 import IPRoute
    from pyroute2.netlink import exceptions as netlink_exceptions
    try:
        with IPRoute() as ipr:
            kind = ipr.route('get', dst=address)[0]['type']
    except netlink_exceptions.NetlinkError:
        kind = None  # no route at all
    if kind == RTN_LOCAL:
        return None
    return ROUTE_TYPES.get(kind, 'not an address of this hypervisor')


def host_uplinks():
    """The interfaces the host's own default routes leave by, and lo: a
    bridge that takes one of them over cuts the host's own traffic."""
    from pyroute2 import IPRoute
    indexes = set()
    with IPRoute() as ipr:
        for family in (socket.AF_INET, socket.AF_INET6):
            for route in ipr.get_default_routes(family=family):
                indexes.update(hop['oif'] for hop in
                               route.get_attr('RTA_MULTIPATH') or ())
                if route.get_attr('RTA_OIF'):
                    indexes.add(route.get_attr('RTA_OIF'))
        names = {link.get_attr('IFLA_IFNAME')
                 for link in ipr.get_links(*indexes)} if indexes else set()
    return sorted(names | {'lo'})


def pool_free_bytes(pool_dir):
    """Free bytes of the file system ``pool_dir`` is (or will be) on."""
    existing = pool_dir
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    return shutil.disk_usage(existing).free


def available_memory_bytes():
    """What the kernel says this host has available for new work
    (MemAvailable of /proc/meminfo)."""
    with open('/proc/meminfo') as f:
        for line in f:
            if line.startswith('MemAvailable:'):
                return int(line.split()[1]) * 1024
    raise exceptions.DriverError(driver='hostagent',
                                 action='read /proc/meminfo',
                                 reason='it has no MemAvailable')


def pool_total_bytes(pool_dir):
    """Size of the file system ``pool_dir`` is (or will be) on."""
    existing = pool_dir
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    return shutil.disk_usage(existing).total


def interface_mark(name):
    """The alias of interface ``name`` ('' if none), None if absent."""
    try:
        with open(os.path.join('/sys/class/net', name, 'ifalias')) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


class Running:
    """The copies of a request that runs: whom to report to, and the
    latest of their deadlines (None: a copy came without one)."""

    def __init__(self, reply_to, deadline):
        self.reply_tos = [reply_to]
        self.deadline = deadline

    def join(self, reply_to, deadline):
        self.reply_tos.append(reply_to)
        if self.deadline is not None:
            self.deadline = None if deadline is None else max(
                self.deadline, deadline)

    def overdue(self):
        """Seconds since the deadline passed, or None while it has not."""
        if self.deadline is None:
            return None
        late = time.time() - self.deadline
        return late if late > 0 else None


class HostAgentManager:

    target = messaging.Target(version=RPC_API_VERSION)

    def __init__(self, conf, bus):
        self.conf = conf
        self.host = conf.hostagent.host
        self.conductor = conductor_rpcapi.ConductorAPI(bus)
        # What this agent sends the conductor with: its policy rules
        # take results and registrations from the service role only.
        self.context = policy.service_context()
        self.virt = load_driver('tenks.virt_drivers',
                                conf.hostagent.virt_driver, conf)
        # bridge_type -> the driver of that name; requests name theirs.
        self.networks = {name: load_driver('tenks.network_drivers', name,
                                           conf)
                         for name in conf.hostagent.network_drivers}
        self.bmc = load_driver('tenks.bmc_drivers',
                               conf.hostagent.bmc_driver, conf)
        self.redfish = load_driver('tenks.redfish_drivers',
                                   conf.hostagent.redfish_driver, conf)
        self.snmp = load_driver('tenks.snmp_drivers',
                                conf.hostagent.snmp_driver, conf)
        self.nodes = nodes.Nodes(self.virt, self.networks, self.bmc,
                                 self.redfish, self.host, self.snmp)
        # Where this hostagent notes the deployments it makes things for.
        self.registry = deployments.Registry(
            conf.hostagent.deployments_dir, conf.state_dir, self.host)
        self.auditor = audit.Audit(self.virt, self.networks, self.bmc,
                                  self.redfish, self.registry, self.snmp)
        # Volumes served to the hypervisors nodes move to.
        self.exports = transfer.Exports(
            conf.hostagent.transfer_address or conf.hostagent.ipmi_address
            or '127.0.0.1', conf.hostagent.transfer_timeout)
        # Checked at start: a typo must not register a wrong inventory.
        self.provider_facts = resources.hostagent_facts(conf.hostagent)
        # request id -> (time it may be forgotten, outcome), oldest first
        self._recent = collections.OrderedDict()
        # request id -> Running
        self._running = {}
        self._lock = threading.Lock()
        # (kind, name...) -> [lock, requests holding or awaiting it]
        self._things = {}

    def running(self):
        """The ids of the requests that run now."""
        with self._lock:
            return sorted(self._running)

    @contextlib.contextmanager
    def _serialised(self, things):
        """Hold the locks of ``things``, taken in sorted order so that
        requests on several things never deadlock."""
        with contextlib.ExitStack() as stack:
            for thing in sorted(set(things)):
                stack.enter_context(self._thing_lock(thing))
            yield

    @contextlib.contextmanager
    def _thing_lock(self, thing):
        """Hold the lock of ``thing``.

        A lock lives while requests hold or await it, so the table does
        not grow with every name ever seen.
        """
        with self._lock:
            entry = self._things.setdefault(thing, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._lock:
                entry[1] -= 1
                if not entry[1]:
                    del self._things[thing]

    def _run(self, context, request_id, reply_to, things, action, *args,
             keep=True):
        """Run ``action(*args)`` once for ``request_id``, alone on each
        of ``things``, unless its deadline (in ``context``) has passed,
        and report its outcome to every copy's ``reply_to``; ``keep``:
        whether a copy that comes after it ended gets the same outcome
        (False: it runs again)."""
        with self._lock:
            outcome = self._kept(request_id)
            if outcome is None:
                running = self._running.get(request_id)
                if running is not None:
                    # The first copy reports to this one's reply_to too.
                    LOG.info('Request %s runs already; joined it',
                             request_id)
                    running.join(reply_to, context.get('deadline'))
                    return
                running = self._running[request_id] = Running(
                    reply_to, context.get('deadline'))
        if outcome is not None:
            self._report([reply_to], request_id, outcome,
                         context.get('deadline'))
            return
        try:
            with self._serialised(things):
                if self._expired(request_id, running, context):
                    return
                outcome = self._outcome(request_id, action, *args)
        finally:
            with self._lock:
                # Not if _expired dropped it: a new copy's may be there.
                if self._running.get(request_id) is running:
                    del self._running[request_id]
                if outcome is not None and keep:
                    self._keep(request_id, running, outcome)
        self._report(running.reply_tos, request_id, outcome,
                     running.deadline)

    def _report(self, reply_tos, request_id, outcome, deadline):
        """Report ``outcome`` to each conductor of ``reply_tos``; to one
        the bus does not take it for (the broker down, or no queue for
        the conductor: either restarting), again every
        rpc.RESEND_INTERVAL s until the request's ``deadline`` (None:
        KEEP_UNDATED s from now), when its conductor stops waiting. One
        conductor out of reach does not keep the others waiting."""
        until = time.time() + KEEP_UNDATED if deadline is None else deadline
        pending = list(reply_tos)
        while True:
            for conductor in list(pending):
                try:
                    self.conductor.report_result(self.context, conductor,
                                                 request_id, self.host,
                                                 **outcome)
                except rpc.UNDELIVERED as e:
                    why = rpc.undelivered(e, conductor)
                    continue
                except Exception as e:
                    LOG.warning('Could not report request %s to %s: %s',
                                request_id, conductor, e)
                pending.remove(conductor)
            if not pending:
                return
            pause = min(rpc.RESEND_INTERVAL, until - time.time())
            if pause <= 0:
                LOG.warning('Could not report request %s to %s before its '
                            'deadline: %s', request_id, ', '.join(pending),
                            why)
                return
            time.sleep(pause)

    def _kept(self, request_id):
        """The kept outcome of ``request_id``, or None. Called with the
        lock held."""
        until, outcome = self._recent.get(request_id, (0, None))
        return outcome if until > time.time() else None

    def _keep(self, request_id, running, outcome):
        """Keep ``outcome`` until the last deadline of the request's
        copies, and forget, oldest first, those whose time has passed.
        Called with the lock held."""
        now = time.time()
        until = running.deadline
        self._recent[request_id] = (
            now + KEEP_UNDATED if until is None else until, outcome)
        self._recent.move_to_end(request_id)
        while self._recent and (
                len(self._recent) > RECENT_RESULTS
                or next(iter(self._recent.values()))[0] <= now):
            self._recent.popitem(last=False)

    def _expired(self, request_id, running, context):
        """Whether the request's deadline has passed; it is then
        forgotten, so that a copy that comes later starts afresh."""
        with self._lock:
            late = running.overdue()
            if late is None:
                return False
            del self._running[request_id]
        LOG.info('Dropped request %s of operation %s unrun: its deadline '
                 'passed %.1f s ago, its conductor no longer waits for it',
                 request_id, context.get('operation'), late)
        return True

    def _outcome(self, request_id, action, *args):
        try:
            value = action(*args)
        except Exception as e:
            if not isinstance(e, exceptions.TenksError):
                LOG.exception('Request %s failed', request_id)
            else:
                LOG.info('Request %s failed: %s', request_id, e)
            return {'error': exceptions.to_report(e)}
        if isinstance(value, dict):
            return {'result': value}
        # A remove_*: whether it removed something.
        return {'result': {'changed': bool(value)}}

    def facts(self):
        """What this hypervisor is and has, for registration."""
        pool_dir = self.conf.hostagent.pool_dir
        return dict(self.virt.facts(), host=self.host,
                    pool_dir=pool_dir,
                    pool_free_gb=pool_free_bytes(pool_dir) // constants.GIB,
                    physnet_mappings=self.conf.hostagent.physnet_mappings,
                    ipmi_address=self.conf.hostagent.ipmi_address,
                    resource_prefix=self.conf.hostagent.resource_prefix,
                    console_log_dir=tenks_conf.console_log_dir(self.conf),
                    network_drivers=list(self.networks),
                    # This host's BMCs listen at its ipmi_address unless
                    # its Redfish emulators have an address of their own.
                    redfish_address=(self.conf.hostagent.redfish_address
                                     or self.conf.hostagent.ipmi_address),
                    redfish_port=self.conf.hostagent.redfish_port,
                    redfish_tls=bool(
                        self.conf.hostagent.redfish_tls_certificate),
                    disk_gb=pool_total_bytes(pool_dir) // constants.GIB,
                    **self.provider_facts)

    def _inspect(self, physnet_mappings, ipmi_address, ipmi_ports,
                 interfaces, owner, redfish_address=None, redfish_port=None,
                 bridge_type=None):
        """Facts, with this host's own mappings and BMC addresses (and
        Redfish port) applied to a spec's, and what of them is missing or
        taken here.

        Also: the pool's free space in bytes, and
        ``foreign_interfaces``, [name, mark] of those of ``interfaces``
        (names a deploy would create) that exist without this
        hostagent's mark for ``owner`` (None: nothing is ours yet).
        Marks are interface aliases, as the network drivers set them, or
        what a driver keeps elsewhere (Open vSwitch's external_ids) for
        the driver of ``bridge_type`` (the spec's; None: every driver).
        ``redfish_port_user``: who holds the Redfish endpoint (see
        RedfishDriver.endpoint_user).
        """
        facts = self.facts()
        marks = {}
        for kind, driver in self.networks.items():
            if bridge_type in (None, kind):
                marks.update(driver.marks(interfaces))
        mappings = dict(physnet_mappings, **facts['physnet_mappings'])
        address = facts['ipmi_address'] or ipmi_address
        redfish_address = facts['redfish_address'] or redfish_address
        redfish_port = facts['redfish_port'] or redfish_port
        for field, value, own in (
                ('ipmi_address', address, facts['ipmi_address']),
                ('redfish_address', redfish_address,
                 self.conf.hostagent.redfish_address)):
            why = value and address_problem(value)
            if why:
                raise exceptions.BmcAddressInvalid(
                    field='[hostagent] %s' % field if own else field,
                    address=value, host=self.host, why=why)
        if redfish_address and redfish_port:
            facts.update(
                redfish_address=redfish_address, redfish_port=redfish_port,
                redfish_port_user=self.redfish.endpoint_user(
                    redfish_address, redfish_port))
        facts.update(
            physnet_mappings=mappings, ipmi_address=address,
            missing_interfaces=[
                (physnet, source)
                for physnet, source in sorted(mappings.items())
                if not os.path.exists(os.path.join('/sys/class/net',
                                                   source))],
            busy_ports=[port for port in ipmi_ports
                        if not netutils.udp_port_free(address, port)],
            # Only a physnet mapping could take an uplink over.
            host_uplinks=host_uplinks() if mappings else [],
            pool_free_bytes=pool_free_bytes(facts['pool_dir']),
            ipmi_free_bytes=self._ipmi_free_bytes(),
            ipmi_bmc_bytes=self.conf.hostagent.ipmi_bmc_memory_kib * 1024,
            foreign_interfaces=[
                [name, mark] for name, mark in (
                    (name, marks[name] if name in marks
                     else interface_mark(name)) for name in interfaces)
                if mark is not None and (
                    owner is None or not names.owns(self._mark(owner),
                                                    mark))])
        return dict(facts, changed=False)

    def _ipmi_free_bytes(self):
        """Memory free for new IPMI BMCs: [hostagent]
        ipmi_free_memory_mb, or what the host has available."""
        limit = self.conf.hostagent.ipmi_free_memory_mb
        if limit is not None:
            return limit * 1024 * 1024
        return available_memory_bytes()

    def _mark(self, owner):
        """This hostagent's mark for deployment ``owner``; see
        nodes.Nodes.mark."""
        return self.nodes.mark(owner)

    def _making(self, owner, action):
        """``action``, run once this hostagent has noted that it makes
        things for deployment ``owner`` (hostagent.deployments)."""
        def make(*args):
            if isinstance(owner, str):
                self.registry.note(owner)
            return action(*args)
        return make

    def register_now(self, context):
        """Register with the conductors at once (a conductor started)."""
        self.conductor.register_agent(self.context, self.host,
                                      self.facts())

    def inspect(self, context, request_id, reply_to, physnet_mappings,
                ipmi_address, ipmi_ports, interfaces, owner,
                redfish_address=None, redfish_port=None, bridge_type=None):
        self._run(context, request_id, reply_to, [], self._inspect,
                  physnet_mappings, ipmi_address, ipmi_ports, interfaces,
                  owner, redfish_address, redfish_port, bridge_type,
                  keep=False)

    def check_pool_devices(self, context, request_id, reply_to, name,
                           devices, owner, wipe=()):
        self._run(context, request_id, reply_to, [('pool', name)],
                  self.virt.check_pool_devices, name, devices,
                  self._mark(owner), wipe)

    def ensure_pool(self, context, request_id, reply_to, name, path, owner,
                    pool_type='dir', devices=(), wipe=()):
        self._run(context, request_id, reply_to,
                  [('pool', name)],
                  self._making(owner, self.virt.ensure_pool), name, path,
                  self._mark(owner),
                  pool_type, devices, wipe)

    def remove_pool(self, context, request_id, reply_to, name, path, owner,
                    pool_type='dir', devices=()):
        self._run(context, request_id, reply_to,
                  [('pool', name)],
                  self.virt.remove_pool, name, path, self._mark(owner),
                  pool_type, devices)

    def ensure_volume(self, context, request_id, reply_to, pool, name,
                      capacity, fmt, owner):
        self._run(context, request_id, reply_to,
                  [('volume', pool, name)],
                  self._making(owner, self.virt.ensure_volume), pool, name,
                  capacity, fmt, self._mark(owner))

    def remove_volume(self, context, request_id, reply_to, pool, name,
                      owner):
        self._run(context, request_id, reply_to,
                  [('volume', pool, name)],
                  self.virt.remove_volume, pool, name, self._mark(owner))

    def _network(self, bridge_type, method):
        """``method`` of the network driver of ``bridge_type``, called
        when the request runs (so that a driver not offered is the
        request's error)."""
        def call(*args):
            return getattr(self.nodes.network(bridge_type), method)(*args)
        return call

    def ensure_bridge(self, context, request_id, reply_to, name, owner,
                      bridge_type=constants.DEFAULT_BRIDGE_TYPE):
        self._run(context, request_id, reply_to,
                  [('bridge', name)],
                  self._making(owner, self._network(bridge_type,
                                                    'ensure_bridge')),
                  name, self._mark(owner))

    def remove_bridge(self, context, request_id, reply_to, name, owner,
                      bridge_type=constants.DEFAULT_BRIDGE_TYPE):
        self._run(context, request_id, reply_to,
                  [('bridge', name)],
                  self._network(bridge_type, 'remove_bridge'), name,
                  self._mark(owner))

    def ensure_uplink(self, context, request_id, reply_to, bridge, source,
                      veth_names, owner,
                      bridge_type=constants.DEFAULT_BRIDGE_TYPE):
        self._run(context, request_id, reply_to, [('uplink', bridge)],
                  self._making(owner, self._network(bridge_type,
                                                    'ensure_uplink')),
                  bridge, source, veth_names, self._mark(owner))

    def remove_uplink(self, context, request_id, reply_to, bridge, source,
                      veth_names, owner,
                      bridge_type=constants.DEFAULT_BRIDGE_TYPE):
        self._run(context, request_id, reply_to, [('uplink', bridge)],
                  self._network(bridge_type, 'remove_uplink'), bridge,
                  source, veth_names, self._mark(owner))

    def ensure_port(self, context, request_id, reply_to, bridge, name,
                    owner, bridge_type=constants.DEFAULT_BRIDGE_TYPE):
        self._run(context, request_id, reply_to, [('port', name)],
                  self._making(owner, self._network(bridge_type,
                                                    'ensure_port')),
                  bridge, name, self._mark(owner))

    def remove_port(self, context, request_id, reply_to, name, owner,
                    bridge_type=constants.DEFAULT_BRIDGE_TYPE):
        self._run(context, request_id, reply_to,
                  [('port', name)],
                  self._network(bridge_type, 'remove_port'), name,
                  self._mark(owner))

    def ensure_domain(self, context, request_id, reply_to, domain, owner):
        self._run(context, request_id, reply_to,
                  [('domain', domain['name'])],
                  self._making(owner, self.virt.ensure_domain), domain,
                  self._mark(owner))

    def remove_domain(self, context, request_id, reply_to, name, owner):
        self._run(context, request_id, reply_to,
                  [('domain', name)],
                  self.virt.remove_domain, name, self._mark(owner))

    def ensure_bmc(self, context, request_id, reply_to, domain, address,
                   port, username, password, owner=None):
        # The domain's lock too: it must stay ours until the BMC is made.
        self._run(context, request_id, reply_to,
                  [('domain', domain), ('bmc', domain)],
                  self._making(owner, self.nodes.ensure_bmc), domain,
                  address, port, username, password, owner)

    def remove_bmc(self, context, request_id, reply_to, domain, owner=None):
        # Whichever its type: a Redfish one is recorded as a bmc too.
        self._run(context, request_id, reply_to, [('bmc', domain)],
                  self.nodes.remove_bmc, domain, owner)

    def set_bmc_fault(self, context, request_id, reply_to, name, bmc, fault,
                      owner):
        self._run(context, request_id, reply_to, [('bmc', name)],
                  self.nodes.set_bmc_fault, name, bmc, fault, owner)

    def ensure_node(self, context, request_id, reply_to, node, owner, force):
        self._run(context, request_id, reply_to, nodes.things(node) or [],
                  self._making(owner, self.nodes.ensure), node, owner, force)

    def remove_node(self, context, request_id, reply_to, node, owner):
        self._run(context, request_id, reply_to, nodes.things(node) or [],
                  self.nodes.remove, node, owner)

    def export_node(self, context, request_id, reply_to, node, owner):
        self._run(context, request_id, reply_to, [('domain', node['name'])],
                  self.nodes.export, node, owner, self.exports)

    def close_export(self, context, request_id, reply_to, name):
        self._run(context, request_id, reply_to, [],
                  lambda: {'changed': self.exports.close(name)})

    def power_node(self, context, request_id, reply_to, name, owner, on):
        self._run(context, request_id, reply_to, [('domain', name)],
                  self.nodes.power, name, owner, on)

    def inspect_nodes(self, context, request_id, reply_to, nodes, owner,
                      parts=None):
        self._run(context, request_id, reply_to, [], self.nodes.inspect,
                  nodes, owner, parts, keep=False)

    def audit(self, context, request_id, reply_to):
        self._run(context, request_id, reply_to, [], self.auditor.survey,
                  keep=False)

    def clean(self, context, request_id, reply_to, owners, daemons):
        self._run(context, request_id, reply_to, [], self.auditor.clean,
                  owners, daemons, self._serialised)
