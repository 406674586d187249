"""Network setup: a bridge per physical network on each hypervisor.

A physnet mapped to an existing interface or bridge is linked to it; one
with no mapping stays an isolated bridge owned by the cluster.
"""

from taskflow.patterns import linear_flow
from taskflow.patterns import unordered_flow

from flows import base


class EnsureBridge(base.EnsureResource):
    kind = 'bridge'


class EnsureUplink(base.EnsureResource):
    kind = 'uplink'


def network_setup_flow(plan):
    flow = unordered_flow.Flow('network-setup')
    owner = plan['owner']
    for host, setup in sorted(plan['hosts'].items()):
        for bridge in setup['bridges']:
            args = {'name': bridge['name'], 'owner': owner}
            chain = linear_flow.Flow('network:%s:%s' % (host, bridge['name']))
            chain.add(EnsureBridge(host, bridge['name'], args, args))
            if bridge['uplink']:
                args = dict(bridge['uplink'], bridge=bridge['name'],
                            owner=owner)
                chain.add(EnsureUplink(host, bridge['name'], args, args))
            flow.add(chain)
    return flow
