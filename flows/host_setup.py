"""Host setup: a storage pool for the cluster on each hypervisor."""

from taskflow.patterns import unordered_flow

from flows import base


class EnsurePool(base.EnsureResource):
    kind = 'pool'


def host_setup_flow(plan):
    flow = unordered_flow.Flow('host-setup')
    for host, setup in sorted(plan['hosts'].items()):
        pool = setup['pool']
        args = dict(pool, owner=plan['owner'])
        flow.add(EnsurePool(host, pool['name'], args, args))
    return flow
