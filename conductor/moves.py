"""Moves of nodes between hypervisors (host maintenance): which nodes
go where, and the plan of a cluster's move operation.

A node keeps its name, UUID, MACs and volumes' contents; its BMC,
bridges, taps and console log are those of its new host.
"""

from tenks import constants
from tenks import exceptions
from tenks import names
from tenks import reconcile
from tenks import scheduler


def peers(host, views):
    """The hosts that share an aggregate with ``host`` (``views``: the
    conductor's view of each host, see conductor.aggregates.host_views),
    ``host`` included; every host when it is in no aggregate."""
    mine = {a['uuid'] for a in views.get(host, {}).get('aggregates', ())}
    if not mine:
        return set(views) | {host}
    return {h for h, view in views.items()
            if mine & {a['uuid'] for a in view['aggregates']}} | {host}


def rebalance(host, views, nodes):
    """The nodes (records) to move to ``host`` so that it and the
    enabled hosts of its aggregates differ by at most one node: taken
    from the fullest host, newest first, one at a time."""
    group = {h for h in peers(host, views)
             if h == host or (views.get(h, {}).get('enabled')
                              and not views[h].get('maintenance'))}
    by_host = {h: [] for h in group}
    for node in nodes:
        if node['hypervisor'] in by_host:
            by_host[node['hypervisor']].append(node)
    for mine in by_host.values():
        mine.sort(key=reconcile.age)
    chosen = []
    while True:
        fullest = max(sorted(group - {host}),
                      key=lambda h: len(by_host[h]), default=None)
        if fullest is None or len(by_host[fullest]) - len(
                by_host[host]) <= 1:
            return chosen
        node = by_host[fullest].pop()
        by_host[host].append(node)
        chosen.append(node)


def movable(spec, node):
    """Raise ChangeRefused for a node whose volumes cannot be copied."""
    for vol in node['volumes']:
        if vol.get('existing'):
            reason = 'its volume %s is an existing volume of pool %s, ' \
                'which Tenks does not own' % (vol['name'], vol['pool'])
        elif (vol.get('source') or {}).get('backing'):
            reason = 'its volume %s is on the backing file %s, which ' \
                'another host may not have' % (vol['name'],
                                               vol['source']['path'])
        else:
            continue
        raise exceptions.ChangeRefused(
            name=spec['cluster'], reason='node %s cannot move: %s' % (
                node['name'], reason))


def moved_record(spec, node, host, endpoint, host_facts):
    """``node``'s record once on ``host`` with its BMC at ``endpoint``
    ((address, port), and an SNMP BMC's outlet there)."""
    prefix = host_facts['resource_prefix']
    node_type = spec['node_types'][node['node_type']]
    # The tap carries the host's prefix: two hostagents of one machine
    # never ask for the same interface.
    nics = [dict(nic, bridge=names.bridge(spec, nic['physnet'], prefix),
                 tap=names.tap(prefix + node['name'], index))
            for index, nic in enumerate(node['nics'])]
    system_id = str(endpoint[2]) if node['bmc_type'] == 'snmp' else (
        node['bmc_system_id'])
    return dict(node, hypervisor=host, bmc_address=endpoint[0],
                bmc_port=endpoint[1], bmc_system_id=system_id, nics=nics,
                console_log=names.console_log(host_facts, node_type,
                                              node['name']))


def plan_move(spec, cluster, facts, nodes, resources, moving, allowed,
              views=None, options=None):
    """The plan of moving ``moving`` (node records of the cluster) to
    hosts of ``allowed``, the scheduler choosing.

    ``cluster``: its record; ``facts``: {host: inspect result};
    ``nodes``: node records of every cluster; ``resources``: the
    cluster's recorded resources (dicts). Returns {'cluster', 'owner',
    'moves': [{'uuid', 'name', 'source', 'target', 'old', 'new'}],
    'host_ensure', 'host_remove'}: the views (tenks.reconcile.view) of
    each node before and after, the cluster's pool and bridges to make
    on the new hosts, and to remove from hosts it leaves.
    """
    for node in moving:
        movable(spec, node)
        if node['hypervisor'] not in facts:
            raise exceptions.ChangeRefused(
                name=spec['cluster'], reason='node %s cannot move: no '
                'hostagent is up on %s to serve its volumes' % (
                    node['name'], node['hypervisor']))
    targets = scheduler.hosts_for_moves(spec, facts, nodes, moving, allowed,
                                    views, options)
    deployment = cluster.uuid
    moves = []
    for node in moving:
        host, endpoint = targets[node['uuid']]
        record = moved_record(spec, node, host, endpoint, facts[host])
        moves.append({
            'uuid': node['uuid'], 'name': node['name'],
            'source': node['hypervisor'], 'target': host,
            'old': reconcile.view(spec, deployment, node,
                                  facts[node['hypervisor']]),
            'new': reconcile.view(spec, deployment, record, facts[host])})
    recorded = {(r['hypervisor'], r['kind'], r['name']) for r in resources}
    host_ensure = []
    for host in sorted({m['target'] for m in moves}):
        host_ensure += [
            {'hypervisor': host, 'kind': kind, 'name': name, 'args': args,
             'old': None}
            for kind, name, args in reconcile.host_resources(
                spec, deployment, host, facts[host])
            if (host, kind, name) not in recorded]
    leaving = {m['uuid'] for m in moves}
    staying = {n['hypervisor'] for n in nodes
               if n['cluster'] == spec['cluster']
               and n['uuid'] not in leaving} | {m['target'] for m in moves}
    emptied = {m['source'] for m in moves} - staying
    return {
        'cluster': spec['cluster'],
        'owner': names.owner(spec['cluster'], deployment),
        'moves': moves,
        'host_ensure': host_ensure,
        'host_remove': [r for r in resources if r['hypervisor'] in emptied
                        and r['kind'] in constants.HOST_REMOVAL],
    }


def moved(plan):
    """How many nodes the move operation of ``plan`` moved, once its flow
    has succeeded: all of them (a failure raises, saying where each node
    is)."""
    return len(plan['moves'])


def in_flight(operations):
    """The records the nodes of running move operations (``operations``,
    with their plans) will have at their new hosts: they hold their new
    BMC ports and room there before they arrive."""
    return [move['new']['record'] for operation in operations
            if operation.kind == 'move' and operation.plan
            for move in operation.plan['moves']]
