"""Teardowns: removing everything recorded for a cluster.

Nodes Ironic has deployed (a Nova server on them, or adopted) refuse the
teardown before anything is removed, unless it is forced.
"""

from conductor import planner
from tenks import exceptions
from tenks import states


class Teardowns:
    """Teardowns of the conductor ``conductor``."""

    def __init__(self, conductor):
        self.conductor = conductor
        self.db = conductor.db
        self.operations = conductor.operations

    def teardown(self, name, force=False):
        """Tear cluster ``name`` down and wait; see submit."""
        return self.operations.wait(self.submit(name, force))

    def submit(self, name, force=False):
        """Start removing everything recorded for cluster ``name``;
        returns the operation id at once. ``force`` removes nodes Ironic
        has deployed all the same (in maintenance, as Ironic requires).
        An interrupted deploy of the cluster ends interrupted."""
        with self.operations.start(name):
            cluster = self.db.get_cluster(name)
            if cluster is None:
                raise exceptions.ClusterNotFound(name=name)
            interrupted = self.operations.interrupted(name)
            if interrupted is not None:
                self.db.finish_operation(interrupted.id,
                                         states.OPERATION_INTERRUPTED)
            operation_id = self.operations.create('teardown', name)
            return self.operations.submit(operation_id, 'teardown', name,
                                          cluster.state, False, self.run,
                                          force)

    def run(self, operation_id, force=False, on_progress=None):
        from flows import teardown
        name = self.db.get_operation(operation_id).cluster
        nodes = [n.as_dict() for n in self.db.list_nodes(cluster=name)]
        resources = [r.as_dict() for r in self.db.list_resources(name)]
        if not force:
            self._check_in_use(name, nodes, resources)
        self.db.set_operation_plan(operation_id, planner.teardown_plan(
            name, nodes, resources, force, self.db.get_cluster(name).state))
        return self.conductor.runner.run(
            operation_id, 'teardown:%s' % name, teardown.get_teardown_flow,
            {'operation_id': operation_id},
            self.conductor.store(operation_id, name),
            on_progress=on_progress)

    def _check_in_use(self, name, nodes, resources):
        """Refuse to tear down nodes Ironic has deployed, naming the Nova
        servers on them: Ironic would refuse to delete them half way
        through the teardown."""
        uuids = [r['remove_args']['uuid'] for r in resources
                 if r['kind'] == 'ironic_node']
        if not uuids:
            return
        from tenks.cloud import ironic
        from tenks.cloud import nova
        conn = self.conductor.cloud.connection
        names = {n['uuid']: n['name'] for n in nodes}
        in_use = []
        for node_uuid, (state, server) in sorted(ironic.deployed_nodes(
                conn, uuids, states.IRONIC_FREE_STATES).items(),
                key=lambda item: names.get(item[0], item[0])):
            node = names.get(node_uuid, node_uuid)
            if server:
                in_use.append('Nova server %s (%s) runs on node %s' % (
                    nova.server_name(conn, server) or '(name unknown)',
                    server, node))
            else:
                in_use.append('node %s is %s' % (node, state))
        if in_use:
            raise exceptions.NodesInUse(name=name, in_use=', '.join(in_use))
