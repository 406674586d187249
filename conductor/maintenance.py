"""Host maintenance: a hypervisor's nodes moved away, or back.

A hypervisor put into maintenance takes no new node, and its nodes move
to other enabled hosts of its aggregates, one move operation per
cluster; taken out, it may take nodes of its peers back (rebalance).
What a move plans and how it runs: conductor.moves and flows.move.
"""

import types

from conductor import inspection
from conductor import moves
from conductor import preflight
from tenks import exceptions
from tenks import states

# What a move of nodes that have all gone elsewhere since ran.
NOTHING_MOVED = types.SimpleNamespace(changed=[], warnings=[], plan=[],
                                      moved=0)


class Maintenance:
    """Host maintenance of the conductor ``conductor``."""

    def __init__(self, conductor):
        self.conductor = conductor
        self.db = conductor.db
        self.operations = conductor.operations
        self.registry = conductor.registry

    def start(self, host, reason=None):
        """Put ``host`` into maintenance (disabled: no new nodes) and
        move its nodes to other enabled hosts of its aggregates.

        Returns {'host', 'operations': [ids], 'refused': {cluster:
        reason}} (a cluster busy with another operation is left for a
        later "maintenance start").
        """
        self.registry.get_hypervisor(host)
        self.db.set_hypervisor_maintenance(host, True, reason or
                                           'in maintenance')
        clusters = {}
        for node in self.db.list_nodes(hypervisor=host):
            clusters.setdefault(node.cluster, []).append(node.uuid)
        return self._submit_moves(host, clusters, None)

    def stop(self, host, rebalance=False):
        """Take ``host`` out of maintenance (enabled); with ``rebalance``,
        move nodes of the other enabled hosts of its aggregates to it
        until they differ by at most one node. Returns what start
        does."""
        self.registry.get_hypervisor(host)
        self.db.set_hypervisor_maintenance(host, False)
        clusters = {}
        if rebalance:
            nodes = [n.as_dict() for n in self.db.list_nodes()]
            for node in moves.rebalance(
                    host, self.conductor.aggregates.host_views(), nodes):
                clusters.setdefault(node['cluster'], []).append(node['uuid'])
        return self._submit_moves(host, clusters, host)

    def _submit_moves(self, host, clusters, target):
        """Submit a move of the nodes {cluster: [uuid]} (to ``target``,
        or where the scheduler chooses among the aggregate's hosts)."""
        result = {'host': host, 'operations': [], 'refused': {}}
        for name, uuids in sorted(clusters.items()):
            try:
                result['operations'].append(
                    self._submit_move(name, host, uuids, target))
            except (exceptions.ClusterBusy, exceptions.ConductorBusy,
                    exceptions.ChangeRefused) as e:
                result['refused'][name] = str(e)
        return result

    def _submit_move(self, name, host, uuids, target):
        with self.operations.start(name):
            if self.operations.interrupted(name) is not None:
                raise exceptions.ChangeRefused(
                    name=name, reason='a deploy of it was interrupted: run '
                    '"tenks deploy" to finish it first')
            cluster = self.db.get_cluster(name)
            operation_id = self.operations.create('move', name, cluster.spec)
            return self.operations.submit(
                operation_id, 'move', name, cluster.state, False,
                self.run, host, uuids, target)

    def run(self, operation_id, host, uuids, target, on_progress):
        """Plan the move of the nodes ``uuids`` of the operation's
        cluster (to ``target``, or to other hosts of the aggregates of
        ``host``, their host) and run it."""
        conductor = self.conductor
        operation = self.db.get_operation(operation_id)
        cluster = self.db.get_cluster(operation.cluster)
        spec = operation.spec
        facts = inspection.inspect(conductor.agents,
                                   conductor.registry.hypervisors(),
                                   spec, operation_id)
        with conductor.allocating():
            views = conductor.aggregates.host_views()
            recorded = [n.as_dict() for n in self.db.list_nodes()]
            # Only deployed nodes still where the request found them: a
            # node half made or removed is its next deploy's business.
            moving = [n for n in recorded if n['uuid'] in uuids
                      and n['state'] == states.NODE_DEPLOYED
                      and n['hypervisor'] != target
                      and (target is not None or n['hypervisor'] == host)]
            if not moving:
                return NOTHING_MOVED
            allowed = ({target} if target is not None
                       else moves.peers(host, views))
            plan = moves.plan_move(
                spec, cluster, facts, recorded + conductor.moving(),
                [r.as_dict() for r in self.db.list_resources(cluster.name)],
                moving, allowed, views, conductor.scheduler_options)
            preflight.check_pools(conductor.agents, plan, operation_id)
            self.db.set_operation_plan(operation_id, plan)
        from flows import move
        outcome = conductor.runner.run(
            operation_id, 'move:%s' % cluster.name, move.get_move_flow,
            {'operation_id': operation_id},
            conductor.store(operation_id, cluster.name),
            on_progress=on_progress)
        outcome.moved = moves.moved(plan)
        return outcome
