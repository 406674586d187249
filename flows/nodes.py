"""VM configuration and BMC: per node, volumes and NIC ports, a defined
(not started) domain, and an emulated BMC in front of it."""

from taskflow.patterns import linear_flow
from taskflow.patterns import unordered_flow

from flows import base
from flows import context
from flows import records
from flows import registration


class EnsureVolume(base.EnsureResource):
    kind = 'volume'


class EnsurePort(base.EnsureResource):
    kind = 'port'


class EnsureDomain(base.EnsureResource):
    kind = 'domain'


class EnsureBmc(base.EnsureResource):
    kind = 'bmc'

    def request_args(self, cluster):
        # The password stays in the cluster record; it is read when
        # needed, never stored in the flow.
        spec = context.get().db.get_cluster(cluster).spec
        return dict(self.ensure_args, password=spec['ipmi_password'])


def node_flow(plan, node):
    host = node['hypervisor']
    owner = plan['owner']
    pool = plan['hosts'][host]['pool']['name']
    parts = unordered_flow.Flow('parts:%s' % node['uuid'])
    for vol in node['volumes']:
        remove = {'pool': pool, 'name': vol['name'], 'owner': owner}
        parts.add(EnsureVolume(host, vol['name'], dict(
            remove, capacity=vol['capacity'], fmt=vol['format']), remove,
            node['uuid']))
    for nic in node['nics']:
        remove = {'name': nic['tap'], 'owner': owner}
        parts.add(EnsurePort(host, nic['tap'],
                             dict(remove, bridge=nic['bridge']), remove,
                             node['uuid']))
    domain = {
        'name': node['name'],
        'uuid': node['uuid'],
        'vcpus': node['vcpus'],
        'memory_mb': node['memory_mb'],
        'domain_type': plan['domain_type'],
        'console_log_enabled': node['console_log_enabled'],
        'disks': [{'pool': pool, 'volume': v['name'], 'format': v['format']}
                  for v in node['volumes']],
        'nics': [{'mac': n['mac'], 'tap': n['tap']} for n in node['nics']],
    }
    bmc = {'domain': node['name'], 'address': node['bmc_address'],
           'port': node['bmc_port'], 'username': plan['ipmi_username']}
    flow = linear_flow.Flow('node:%s' % node['uuid'])
    flow.add(
        records.StartNode(node['uuid']),
        parts,
        EnsureDomain(host, node['name'], {'domain': domain, 'owner': owner},
                     {'name': node['name'], 'owner': owner}, node['uuid']),
        EnsureBmc(host, node['name'], bmc, {'domain': node['name']},
                  node['uuid']),
    )
    if node.get('ironic'):
        flow.add(registration.EnsureIronicNode(node, node['ironic']))
    flow.add(records.FinishNode(node['uuid']))
    return flow


def nodes_flow(plan):
    flow = unordered_flow.Flow('nodes')
    for node in plan['nodes']:
        flow.add(node_flow(plan, node))
    return flow
