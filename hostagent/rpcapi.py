"""Client side of the hostagent RPC API.

Every method is a cast to one hypervisor (``server=host``) carrying a
``request_id`` and the name of the conductor to report to
(``reply_to``), and in its context its operation and deadline (1.6);
the agent answers with the conductor's ``report_result``. Operations
come in idempotent ``ensure_*`` / ``remove_*`` pairs, so a repeated
request does no harm.

``ensure_node(node, owner, force)`` converges one node to ``node``::

    {'uuid', 'name', 'domain_type', 'vcpus', 'memory_mb',
     'console_log_enabled', 'console_log', 'boot_mode', 'secure_boot',
     'pool',
     'volumes': [{'name', 'capacity' (bytes), 'format', 'device',
                  'source'} or {'name', 'pool', 'existing': True,
                  'device'}],
     'nics': [{'mac', 'tap', 'bridge', 'bridge_type'}],
     'bmc': {'type' ('ipmi' default, 'redfish', 'snmp'), 'address',
             'port', 'username', 'password' (snmp: the community),
             'system_id' (redfish), 'outlet' (snmp)},
     'remove': {'volumes': [name, ...], 'ports': [tap, ...],
                'port_types': {tap: bridge_type}}}

(``bridge_type`` ``linuxbridge`` or ``openvswitch``, the network driver
of the NIC's bridge: ``linuxbridge`` where it is left out. Optional
``cpu_mode`` and ``machine``: the domain's CPU mode and machine type,
sent only for node types that set them, whose nodes the scheduler gives
only to agents whose facts list ``machines`` and ``cpu_modes``, {domain
type: [names]} of what their libvirt has.)

and reports ``{'changed', 'created', 'updated', 'removed',
'power_state'}``, the middle three lists of ``[kind, name]`` (kinds
volume, port, domain, bmc). A running domain that would change raises
NodeRunning unless ``force``: then it is powered off, changed and
started again. ``remove_node(node, owner)`` (``remove`` not used)
reports ``{'changed', 'removed'}``.

``inspect_nodes(nodes, owner)`` takes a list of nodes as ensure_node
takes them (``remove`` not looked at) and changes nothing: no IPMI
host started, no domain defined. It reports ``{'changed': False, 'nodes':
{uuid: [[kind, name, what], ...]}}``, what ensure_node of each node
would make or change (``[]``: nothing); ``what`` is ``missing`` (a BMC
too when the IPMI host does not run), ``differs``, ``foreign`` (a thing of that
name that is not ``owner``'s: ensure_node would refuse), ``stopped`` (a
BMC as asked that does not run) or ``smaller`` (a volume to grow). It
reads each kind of thing once for all the nodes.

During a rolling upgrade a conductor sends no cast newer than the cap
[upgrade_levels] hostagent sets (the oldest hostagent's version). Under
it, a cast is sent in the older form where one does the same: without
``parts`` (inspect_nodes then reads every kind of part; the caller reads
what it asked for), and below 1.6 with its deadline still in the
context but not asking for 1.6 (an older agent runs it whenever it
comes, as it always did). A method newer than the cap, and an
argument newer than it that changes what the agent does (``bridge_type``,
``pool_type``, ``devices``, ``wipe``, the Redfish endpoint of inspect),
raise VersionCapped, naming them, the version needed and the cap, before
anything is sent. register_now is not sent below 1.1.

API version history:

* 1.0 - Initial version: inspect; ensure/remove of pool, volume, bridge,
  uplink, port, domain and bmc. Everything but BMCs carries an owner
  mark (volumes too); every ensure_* result says whether it
  ``created`` the thing.
* 1.1 - register_now: a cast to every hostagent (fanout) asking it to
  register at once, sent by a conductor that starts, so that agents
  started before it need not wait for their next heartbeat.
* 1.2 - ensure_node and remove_node: one request converges or removes a
  whole node (volumes, ports, domain, BMC); see hostagent.nodes.
* 1.3 - inspect_nodes: what ensure_node would do to each of many nodes,
  read at once, changing nothing (a re-run finds drift cheaply).
* 1.4 - ensure_node, inspect_nodes and remove_node ask for 1.4, whose
  agents know the node's new fields (an older agent would ignore them
  and build the wrong node). A node may have ``boot_mode``
  ('bios', the default, or 'uefi': OVMF and an NVRAM file of its own),
  ``secure_boot`` (bool, default false; with uefi: the secure boot
  firmware, SMM, q35) and ``console_log`` (the log file's path in the
  hypervisor's console_log_dir, or null; without the key it follows
  ``console_log_enabled``). inspect_nodes reports a missing NVRAM file
  as the domain's ``differs``; remove_node removes the NVRAM file and
  the console log (unless [hostagent] keep_console_logs). The facts
  have ``firmware`` (['bios', 'secure_boot', 'uefi'], what the
  hypervisor can boot) and ``console_log_dir``. Open vSwitch: an optional
  ``bridge_type`` (default ``linuxbridge``) on ensure/remove of bridge,
  uplink and port, on a node's NICs and, as ``remove.port_types``, on
  the ports a node request removes; the agent picks that network
  driver. ``inspect`` reports ``network_drivers`` (the list offered)
  instead of ``network_driver``, and with ``bridge_type`` reads the
  marks of that driver's interfaces only.
  Storage: ensure_pool and remove_pool take ``pool_type`` ('dir',
  the default, or 'logical': an LVM volume group) and ``devices`` (its
  block devices). A volume of ensure_node may have ``device`` ('disk'
  or 'cdrom'), ``source`` ({'path' or 'url', 'backing': bool}: made
  from that image, copied or on it as a backing file) or be
  ``existing`` (true, with its ``pool``, and no capacity, format or
  source: somebody else's volume, attached as it is, never resized,
  marked or removed); inspect_nodes reports a missing existing volume
  and a volume whose backing file differs.
  Redfish: inspect takes ``redfish_address``
  and ``redfish_port`` (the spec's; the agent's [hostagent] options win)
  and reports them with ``redfish_tls`` and ``redfish_port_user`` (None:
  free; the owner mark of the Tenks emulator holding it; '': another
  process). A node request's ``bmc`` may say ``type: redfish`` with a
  ``system_id`` (the domain's UUID): ensure_node makes the system served
  by its owner's sushy-tools emulator (started on demand) and removes an
  IPMI BMC of the node, and the other way round; remove_node and
  inspect_nodes cover both types (a stopped emulator is ``stopped``).
* 1.5 - Moves (host maintenance). ``export_node(node, owner)`` powers
  the node's domain off and serves its volumes over HTTP
  (hostagent.transfer), reporting ``{'changed', 'power_state' (before),
  'volumes': {name: {'url', 'token'}}}``; ``node`` is ``{'name',
  'pool', 'volumes': [{'name'}]}``. ``close_export(name)`` stops
  serving them. ``power_node(name, owner, on)`` starts or powers off a
  domain. A volume's ``source`` of ensure_node may carry the ``token``
  an export gave (sent in the X-Tenks-Transfer-Token header).
* 1.6 - Deadlines. Every request's context carries ``operation`` (the
  id of the operation it is part of, or None) and ``deadline`` (UTC
  epoch seconds: when its conductor stops waiting for it, its retries
  included). The agent drops a request whose deadline has passed when
  it is about to run it (after waiting for its locks): unrun,
  unreported, no outcome kept; a request it has finished is still
  answered at once. A request without a deadline (from an older
  conductor) runs whenever it comes. Casts with a deadline ask for 1.6:
  an older agent would run them after their operation has ended.
* 1.7 - inspect_nodes takes ``parts``, the kinds of part to read
  (``volume``, ``bridge``, ``port``, ``domain``, ``bmc``; default all):
  a deploy's check of its new nodes reads their domains and volumes
  only, without a round trip to the BMC daemons.
* 1.8 - Devices of logical pools. ``check_pool_devices(name, devices,
  owner, wipe)`` changes nothing and raises DeviceRefused, naming each
  device and what it found, unless the volume group ``name`` may take
  the ``devices``: whole block devices that nothing uses and that hold
  nothing, or hold data but are in ``wipe``. ensure_pool makes the same
  check before it builds a volume group, and takes ``wipe`` (the
  devices it may wipe).
* 1.9 - BMCs are owned. ensure_bmc and remove_bmc take ``owner`` and
  refuse a request without it (an older conductor's) with
  InvalidNodeRequest. An IPMI BMC records the hostagent's mark for its
  owner: ensure_bmc serves only a domain with that mark
  (ResourceConflict for a domain of somebody else or without a mark,
  DriverError for one not defined), and neither it nor a node request
  changes or removes a BMC made for another owner (ResourceConflict;
  inspect_nodes reports it ``foreign``). A Redfish system is removed
  from its owner's emulator only.
* 1.10 - The audit (hostagent.audit). Before a request makes anything
  for a deployment, the agent notes the state directory it serves in
  [hostagent] deployments_dir (hostagent.deployments). ``audit()`` reads
  only, and reports ``{'changed': False, 'things': [{'kind', 'name',
  'mark', ...}], 'daemons': [{'kind', 'directory', 'pids', 'orphan'}],
  'deployments': {deployment mark: [verdict, reason]}, 'state_dir'}``:
  everything here that carries a Tenks owner mark, whoever's (kinds
  domain, pool, volume, nvram, bridge, port, veth, ovs port, bmc,
  emulator; see the drivers' marked()), the IPMI hosts and Redfish
  emulators of every state directory (``orphan``: why they serve what no
  Tenks has any more, or None), and what the notes say of each
  deployment found (``live``, ``unknown``, ``here``: noted by this
  agent's own state directory, which has no state database, or
  ``dead``). ``clean(owners, daemons)`` removes, through the drivers'
  removal paths, what carries the marks of the deployments ``owners``
  (whichever agent made it; not one its notes prove alive or leave
  unknown) and stops the orphans of ``daemons`` ([kind, directory]); it
  reports ``{'changed', 'removed': [[kind, name]], 'stopped': [[kind,
  directory]], 'failed': [[kind, name, error]]}``.
* 1.11 - SNMP BMCs. A node request's ``bmc`` may say ``type: snmp`` with
  its ``outlet`` (its ``password`` is the SNMP community): an outlet of
  its owner's VirtualPDU on this hypervisor. The audit reports PDUs
  (kind ``pdu``, their ``systems`` {domain: outlet}) and their processes
  (daemons of kind ``virtualpdu``).
* 1.12 - BMC faults. ``set_bmc_fault(name, bmc, fault, owner)`` makes
  ``owner``'s BMC of domain ``name``, of type ``bmc`` (``ipmi``,
  ``redfish`` or, from agents that have it, ``snmp``), show ``fault``
  (tenks.bmc_faults; None clears it) until it is cleared or the BMC
  removed, across restarts of the agent and of the BMC's daemon; it
  reports ``{'changed'}``. DriverError when the node has no such BMC
  here (clearing then changes nothing), InvalidNodeRequest for a bad
  fault or type, or a kind the type cannot show.
"""

from tenks import constants
from tenks import rpc

RPC_API_VERSION = '1.12'

# Methods, with the keyword arguments each takes.
METHODS = {
    'inspect': ('physnet_mappings', 'ipmi_address', 'ipmi_ports',
                'interfaces', 'owner'),
    'check_pool_devices': ('name', 'devices', 'owner'),
    'ensure_pool': ('name', 'path', 'owner'),
    'remove_pool': ('name', 'path', 'owner'),
    'ensure_volume': ('pool', 'name', 'capacity', 'fmt', 'owner'),
    'remove_volume': ('pool', 'name', 'owner'),
    'ensure_bridge': ('name', 'owner'),
    'remove_bridge': ('name', 'owner'),
    'ensure_uplink': ('bridge', 'source', 'veth_names', 'owner'),
    'remove_uplink': ('bridge', 'source', 'veth_names', 'owner'),
    'ensure_port': ('bridge', 'name', 'owner'),
    'remove_port': ('name', 'owner'),
    'ensure_domain': ('domain', 'owner'),
    'remove_domain': ('name', 'owner'),
    'ensure_bmc': ('domain', 'address', 'port', 'username', 'password',
                   'owner'),
    'remove_bmc': ('domain', 'owner'),
    'ensure_node': ('node', 'owner', 'force'),
    'remove_node': ('node', 'owner'),
    'inspect_nodes': ('nodes', 'owner'),
    'export_node': ('node', 'owner'),
    'close_export': ('name',),
    'power_node': ('name', 'owner', 'on'),
    'audit': (),
    'clean': ('owners', 'daemons'),
    'set_bmc_fault': ('name', 'bmc', 'fault', 'owner'),
}
# Keyword arguments a method may also take (since 1.4), sent only when
# they differ from the default: a bridge's type (Open vSwitch), a logical
# pool's type and devices (and those it may wipe), the Redfish endpoint
# of a spec with Redfish nodes.
OPTIONAL = dict({method: ('bridge_type',) for method in (
    'ensure_bridge', 'remove_bridge', 'ensure_uplink', 'remove_uplink',
    'ensure_port', 'remove_port')},
    check_pool_devices=('wipe',),
    ensure_pool=('pool_type', 'devices', 'wipe'),
    remove_pool=('pool_type', 'devices'),
    inspect=('redfish_address', 'redfish_port', 'bridge_type'),
    inspect_nodes=('parts',))
# The version that brought an optional argument, when not 1.4.
OPTIONAL_SINCE = {'parts': '1.7', 'wipe': '1.8'}
# The version that brought each method (or, for the BMC requests, their
# owner); the others are 1.0's. A cast asks for it, so an older agent
# refuses the request instead of failing somewhere inside it.
SINCE = {'ensure_node': '1.4', 'remove_node': '1.4',
         'inspect_nodes': '1.4', 'export_node': '1.5', 'close_export': '1.5',
         'power_node': '1.5', 'check_pool_devices': '1.8',
         'ensure_bmc': '1.9', 'remove_bmc': '1.9', 'audit': '1.10',
         'clean': '1.10', 'set_bmc_fault': '1.12'}
# What a node request with an SNMP BMC asks for.
SNMP = '1.11'
# What a cast with a deadline asks for (every method has it).
DEADLINES = '1.6'
# Optional arguments an older agent can do without, left out when the
# cap does not let the client send the version that brought them:
# without ``parts``, inspect_nodes reads and reports every kind of part.
DROPPABLE = {'parts'}


def node_request(view, passwords, gone=None):
    """The ``node`` argument of ensure_node and inspect_nodes for a node
    of a plan (tenks.reconcile.view): its state, and the parts of
    ``gone`` (an earlier view) it no longer has removed. ``passwords``:
    {BMC type: password} (tenks.reconcile.bmc_passwords)."""
    node = {k: view[k] for k in ('uuid', 'name', 'domain_type', 'vcpus',
                                 'memory_mb', 'console_log_enabled',
                                 'boot_mode', 'secure_boot', 'pool',
                                 'volumes')}
    # None with logging on: a node recorded before Tenks recorded the
    # path; the hostagent's own default path is the one it has.
    if view['console_log'] is not None or not view['console_log_enabled']:
        node['console_log'] = view['console_log']
    # Only when set: the scheduler gives such nodes only to hostagents
    # that know them (their facts list machine types).
    for key in ('cpu_mode', 'machine'):
        if view.get(key):
            node[key] = view[key]
    node['nics'] = [dict({k: nic[k] for k in ('mac', 'tap', 'bridge')},
                         bridge_type=nic.get(
                             'bridge_type', constants.DEFAULT_BRIDGE_TYPE))
                    for nic in view['nics']]
    bmc = view['bmc']
    node['bmc'] = dict(bmc, password=passwords[bmc['type']])
    # The hostagent's own configuration decides whether its Redfish
    # emulators serve HTTPS.
    node['bmc'].pop('tls', None)
    node['remove'] = {'volumes': [], 'ports': []}
    if gone is not None:
        volumes = {vol['name'] for vol in view['volumes']}
        taps = {nic['tap'] for nic in view['nics']}
        ports = [n for n in gone['nics'] if n['tap'] not in taps]
        node['remove'] = {
            'volumes': [v['name'] for v in gone['volumes']
                        if v['name'] not in volumes
                        and not v.get('existing')],
            'ports': [n['tap'] for n in ports],
            'port_types': {n['tap']: n['bridge_type'] for n in ports
                           if n.get('bridge_type',
                                    constants.DEFAULT_BRIDGE_TYPE)
                           != constants.DEFAULT_BRIDGE_TYPE}}
    return node


class HostAgentAPI:

    def __init__(self, bus):
        self.client = bus.get_client(rpc.HOSTAGENT_TOPIC, RPC_API_VERSION,
                                     delivered=True)

    def cast(self, host, method, request_id, reply_to, *, operation=None,
             deadline=None, **kwargs):
        """Ask the agent on ``host`` to run ``method``; it reports back.

        ``deadline``: when the caller stops waiting (UTC epoch seconds);
        the agent does not start the request after it. ``operation``:
        the operation the request is part of, for the agent's log.
        """
        expected = set(METHODS[method])
        optional = set(OPTIONAL.get(method, ()))
        if not expected <= set(kwargs) <= expected | optional:
            raise TypeError('%s takes %s (and optionally %s), got %s' % (
                method, sorted(expected), sorted(optional), sorted(kwargs)))
        # The newest version of what the request uses: an older agent
        # refuses it rather than ignore a part of it. Under a cap, what
        # an older agent can do without is left out instead.
        since = SINCE.get(method, '1.0')
        versions = [since]
        beyond = []
        for arg in sorted(set(kwargs) & optional):
            needs = OPTIONAL_SINCE.get(arg, '1.4')
            if not self.client.can_send_version(needs):
                if arg in DROPPABLE:
                    del kwargs[arg]
                    continue
                beyond.append(arg)
            versions.append(needs)
        if _has_snmp(kwargs):
            if not self.client.can_send_version(SNMP):
                beyond.append('an SNMP BMC')
            versions.append(SNMP)
        context = {}
        if deadline is not None:
            context = {'operation': operation, 'deadline': deadline}
            # Under a cap below 1.6 it goes at the older version: an
            # older agent runs the request whenever it comes, as it
            # always did; a newer one still drops it when late.
            if self.client.can_send_version(DEADLINES):
                versions.append(DEADLINES)
        version = max(versions, key=lambda v: tuple(map(int, v.split('.'))))
        # Mandatory, failing fast: the caller (conductor.agents) sends
        # it again while the bus does not take it.
        cctxt = rpc.delivered(self.client, server=host, version=version)
        # Named only when the method itself may be sent.
        if not self.client.can_send_version(since):
            beyond = []
        with rpc.capped(rpc.HOSTAGENT_TOPIC, method, beyond):
            cctxt.cast(context, method, request_id=request_id,
                       reply_to=reply_to, **kwargs)

    def ask_to_register(self):
        """Ask every hostagent to register with its facts now; not
        under a cap below 1.1 (the agents register at their next
        heartbeat)."""
        if self.client.can_send_version('1.1'):
            self.client.prepare(fanout=True, version='1.1',
                                retry=rpc.CAST_RETRY).cast({}, 'register_now')


def _has_snmp(kwargs):
    """Whether the node(s) of a request's arguments have an SNMP BMC."""
    nodes = kwargs.get('nodes') or [kwargs.get('node')]
    return any(isinstance(node, dict) and isinstance(node.get('bmc'), dict)
               and node['bmc'].get('type') == 'snmp' for node in nodes)
