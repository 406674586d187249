"""Host and network setup: a storage pool for the cluster on each
hypervisor, and a bridge per physical network.

A physnet mapped to an existing interface or bridge is linked to it (an
uplink); one with no mapping stays an isolated bridge owned by the
cluster.
"""

from taskflow.patterns import linear_flow
from taskflow.patterns import unordered_flow

from flows import base
from flows import teardown
from tenks import reconcile


class EnsurePool(base.EnsureResource):
    kind = 'pool'


class EnsureBridge(base.EnsureResource):
    kind = 'bridge'


class EnsureUplink(base.EnsureResource):
    kind = 'uplink'


TASKS = {'pool': EnsurePool, 'bridge': EnsureBridge, 'uplink': EnsureUplink}


def host_setup_flow(entries, tasks=None):
    """Pools and bridges of every host, each uplink after its bridge.

    ``entries``: the plan's ``host_ensure`` (tenks.reconcile.plan); an
    uplink whose source changed is removed, then made again. ``tasks``:
    the task class of each kind (default TASKS).
    """
    tasks = tasks or TASKS
    flow = unordered_flow.Flow('host-setup')
    chains = {}
    for entry in entries:
        host, kind, name = entry['hypervisor'], entry['kind'], entry['name']
        if kind == 'pool':
            flow.add(tasks['pool'](host, name, entry['args'],
                                   reconcile.recorded_args(entry['args']),
                                   new=True))
            continue
        chain = chains.get((host, name))
        if chain is None:
            chain = chains[(host, name)] = linear_flow.Flow(
                'network:%s:%s' % (host, name))
            flow.add(chain)
        if kind == 'bridge':
            chain.add(tasks['bridge'](host, name, entry['args'],
                                      entry['args'], new=True))
            continue
        if entry['old'] is not None:
            # Same veth names, another source: the old link goes first.
            chain.add(*teardown.removals([{
                'hypervisor': host, 'kind': kind, 'name': name,
                'remove_args': entry['old']}]))
        chain.add(tasks['uplink'](host, name, entry['args'], entry['args'],
                                  new=entry['old'] is None))
    return flow
