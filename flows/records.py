"""Conductor-side tasks that move clusters and nodes through states."""

from taskflow import task

from conductor import services
from flows import base

CLUSTER_SCHEDULED = 'scheduled'
CLUSTER_DEPLOYING = 'deploying'
CLUSTER_DEPLOYED = 'deployed'
CLUSTER_FAILED = 'failed'
CLUSTER_DELETING = 'deleting'
NODE_SCHEDULED = 'scheduled'
NODE_DEPLOYING = 'deploying'
NODE_DEPLOYED = 'deployed'


class MarkCluster(task.Task):
    """Move the cluster to ``state``; return the state it had.

    Reversion strategy: a cluster this operation scheduled is forgotten
    with its nodes that never started, unless some of its resources could
    not be removed; any other is marked failed, so a failed operation
    never leaves it looking busy or healthy, and teardown can finish.
    """

    def __init__(self, state):
        super().__init__(name='cluster:%s' % state, requires=(base.CLUSTER,))
        self.state = state

    def execute(self, cluster):
        db = services.get().db
        previous = db.get_cluster(cluster).state
        db.set_cluster_state(cluster, self.state)
        return previous

    def revert(self, result, cluster, **kwargs):
        db = services.get().db
        for node in db.list_nodes(cluster=cluster):
            if node.state == NODE_SCHEDULED:
                db.delete_node(node.uuid)
        if result == CLUSTER_SCHEDULED and not db.list_resources(cluster):
            db.delete_cluster(cluster)
        else:
            db.set_cluster_state(cluster, CLUSTER_FAILED)


class MarkNode(task.Task):
    """Move a node to ``state``; return the state it had.

    Reversion strategy: a node this operation scheduled is forgotten,
    its resources being reverted by their own tasks; any other gets the
    state it had back.
    """

    def __init__(self, node_uuid, state):
        super().__init__(name='node:%s:%s' % (node_uuid, state))
        self.node_uuid = node_uuid
        self.state = state

    def execute(self):
        db = services.get().db
        previous = db.get_node(self.node_uuid).state
        db.set_node_state(self.node_uuid, self.state)
        return previous

    def revert(self, result, **kwargs):
        db = services.get().db
        if result == NODE_SCHEDULED:
            db.delete_node(self.node_uuid)
        elif isinstance(result, str):
            db.set_node_state(self.node_uuid, result)


class ForgetCluster(task.Task):
    """Delete the records of a cluster whose resources are all removed.

    Reversion strategy: none; it runs last, when nothing remains, and a
    record deleted is not worth bringing back.
    """

    def __init__(self):
        super().__init__(name='cluster:forget', requires=(base.CLUSTER,))

    def execute(self, cluster):
        db = services.get().db
        for node in db.list_nodes(cluster=cluster):
            db.delete_node(node.uuid)
        db.delete_cluster(cluster)

    def revert(self, result, **kwargs):
        pass
