"""Client side of the hostagent RPC API.

Every method is a cast to one hypervisor (``server=host``) carrying a
``request_id`` and the name of the conductor to report to
(``reply_to``); the agent answers with the conductor's
``report_result``. Operations come in idempotent ``ensure_*`` /
``remove_*`` pairs, so a repeated request does no harm.

``ensure_node(node, owner, force)`` converges one node to ``node``::

    {'uuid', 'name', 'domain_type', 'vcpus', 'memory_mb',
     'console_log_enabled', 'pool',
     'volumes': [{'name', 'capacity' (bytes), 'format'}],
     'nics': [{'mac', 'tap', 'bridge'}],
     'bmc': {'type' ('ipmi' default, 'redfish'), 'address', 'port',
             'username', 'password', 'system_id' (redfish)},
     'remove': {'volumes': [name, ...], 'ports': [tap, ...]}}

and reports ``{'changed', 'created', 'updated', 'removed',
'power_state'}``, the middle three lists of ``[kind, name]`` (kinds
volume, port, domain, bmc). A running domain that would change raises
NodeRunning unless ``force``: then it is powered off, changed and
started again. ``remove_node(node, owner)`` (``remove`` not used)
reports ``{'changed', 'removed'}``.

``inspect_nodes(nodes, owner)`` takes a list of nodes as ensure_node
takes them (``remove`` not looked at) and changes nothing: no vbmcd
started, no domain defined. It reports ``{'changed': False, 'nodes':
{uuid: [[kind, name, what], ...]}}``, what ensure_node of each node
would make or change (``[]``: nothing); ``what`` is ``missing`` (a BMC
too when vbmcd does not run), ``differs``, ``foreign`` (a thing of that
name that is not ``owner``'s: ensure_node would refuse), ``stopped`` (a
BMC as asked that does not run) or ``smaller`` (a volume to grow). It
reads each kind of thing once for all the nodes.

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
* 1.4 - Redfish (helper "redfish"): inspect takes ``redfish_address``
  and ``redfish_port`` (the spec's; the agent's [hostagent] options win)
  and reports them with ``redfish_tls`` and ``redfish_port_user`` (None:
  free; the owner mark of the Tenks emulator holding it; '': another
  process). A node request's ``bmc`` may say ``type: redfish`` with a
  ``system_id`` (the domain's UUID): ensure_node makes the system served
  by its owner's sushy-tools emulator (started on demand) and removes an
  IPMI BMC of the node, and the other way round; remove_node and
  inspect_nodes cover both types (a stopped emulator is ``stopped``).
"""

from tenks import rpc

RPC_API_VERSION = '1.3'

# Methods, with the keyword arguments each takes.
METHODS = {
    'inspect': ('physnet_mappings', 'ipmi_address', 'ipmi_ports',
                'interfaces', 'owner', 'redfish_address', 'redfish_port'),
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
    'ensure_bmc': ('domain', 'address', 'port', 'username', 'password'),
    'remove_bmc': ('domain',),
    'ensure_node': ('node', 'owner', 'force'),
    'remove_node': ('node', 'owner'),
    'inspect_nodes': ('nodes', 'owner'),
}
# The version that brought each method; the others are 1.0's. A cast
# asks for it, so an older agent refuses the request instead of failing
# somewhere inside it.
SINCE = {'ensure_node': '1.2', 'remove_node': '1.2',
         'inspect_nodes': '1.3'}


def node_request(view, passwords, gone=None):
    """The ``node`` argument of ensure_node and inspect_nodes for a node
    of a plan (tenks.reconcile.view): its state, and the parts of
    ``gone`` (an earlier view) it no longer has removed. ``passwords``:
    {BMC type: password} (tenks.reconcile.bmc_passwords)."""
    node = {k: view[k] for k in ('uuid', 'name', 'domain_type', 'vcpus',
                                 'memory_mb', 'console_log_enabled',
                                 'pool', 'volumes')}
    node['nics'] = [{k: nic[k] for k in ('mac', 'tap', 'bridge')}
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
        node['remove'] = {
            'volumes': [v['name'] for v in gone['volumes']
                        if v['name'] not in volumes],
            'ports': [n['tap'] for n in gone['nics'] if n['tap'] not in taps]}
    return node


class HostAgentAPI:

    def __init__(self, bus):
        self.client = bus.get_client(rpc.HOSTAGENT_TOPIC, RPC_API_VERSION)

    def cast(self, host, method, request_id, reply_to, **kwargs):
        """Ask the agent on ``host`` to run ``method``; it reports back."""
        expected = set(METHODS[method])
        if set(kwargs) != expected:
            raise TypeError('%s takes %s, got %s' % (
                method, sorted(expected), sorted(kwargs)))
        cctxt = self.client.prepare(server=host,
                                    version=SINCE.get(method, '1.0'))
        cctxt.cast({}, method, request_id=request_id, reply_to=reply_to,
                   **kwargs)

    def ask_to_register(self):
        """Ask every hostagent to register with its facts now."""
        self.client.prepare(fanout=True, version='1.1').cast(
            {}, 'register_now')
