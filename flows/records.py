"""Conductor-side tasks that move clusters and nodes through states."""

from taskflow import task

from flows import base
from flows import context

CLUSTER_SCHEDULED = 'scheduled'
CLUSTER_DEPLOYING = 'deploying'
CLUSTER_DEPLOYED = 'deployed'
CLUSTER_FAILED = 'failed'
CLUSTER_DELETING = 'deleting'
NODE_SCHEDULED = 'scheduled'
NODE_DEPLOYING = 'deploying'
NODE_DEPLOYED = 'deployed'
# Its first deploy failed and left resources that could not be removed:
# kept (name, UUID, MACs) so a re-run or a teardown can finish.
NODE_FAILED = 'failed'


def settle_new_node(db, node_uuid):
    """Forget a node whose first deploy failed, unless some of its
    resources remain recorded."""
    if db.list_resources(node=node_uuid):
        db.set_node_state(node_uuid, NODE_FAILED)
    else:
        db.delete_node(node_uuid)


class MarkCluster(task.Task):
    """Move the cluster to ``state``; return the state it had.

    Reversion strategy: a cluster this operation scheduled is forgotten
    with its nodes that never started, unless some of its resources could
    not be removed; any other is marked failed, so a failed operation
    never leaves it looking busy or healthy, and a re-run or a teardown
    can finish.
    """

    def __init__(self, state):
        super().__init__(name='cluster:%s' % state, requires=(base.CLUSTER,))
        self.state = state

    def execute(self, cluster):
        db = context.get().db
        previous = db.get_cluster(cluster).state
        db.set_cluster_state(cluster, self.state)
        return previous

    def revert(self, result, cluster, **kwargs):
        db = context.get().db
        for node in db.list_nodes(cluster=cluster):
            if node.state == NODE_SCHEDULED:
                settle_new_node(db, node.uuid)
        if result == CLUSTER_SCHEDULED and not db.list_resources(cluster):
            db.delete_cluster(cluster)
        else:
            db.set_cluster_state(cluster, CLUSTER_FAILED)


def node_payload(node):
    """What other services get to know of a node in its events."""
    return {'name': node.name, 'uuid': node.uuid,
            'hypervisor': node.hypervisor, 'bmc_type': node.bmc_type,
            'bmc_address': node.bmc_address, 'bmc_port': node.bmc_port,
            'macs': [nic['mac'] for nic in node.nics]}


class StartNode(task.Task):
    """Mark a node deploying; provide the state it had.

    Reversion strategy: a node this operation scheduled is forgotten
    once its own tasks have reverted its resources, or kept as failed
    while some remain recorded; any other gets the state it had back.
    """

    def __init__(self, node_uuid):
        super().__init__(name='node:%s:start' % node_uuid,
                         provides='node-before:%s' % node_uuid)
        self.node_uuid = node_uuid

    def execute(self):
        db = context.get().db
        previous = db.get_node(self.node_uuid).state
        db.set_node_state(self.node_uuid, NODE_DEPLOYING)
        return previous

    def revert(self, result, **kwargs):
        db = context.get().db
        if result == NODE_SCHEDULED:
            settle_new_node(db, self.node_uuid)
        elif isinstance(result, str):
            db.set_node_state(self.node_uuid, result)


class FinishNode(task.Task):
    """Mark a node deployed; announce it if this operation created it.

    Reversion strategy: back to deploying, for StartNode's revert to
    settle.
    """

    def __init__(self, node_uuid):
        super().__init__(name='node:%s:finish' % node_uuid,
                         requires=(base.CLUSTER,),
                         rebind={'before': 'node-before:%s' % node_uuid})
        self.node_uuid = node_uuid

    def execute(self, cluster, before):
        svc = context.get()
        svc.db.set_node_state(self.node_uuid, NODE_DEPLOYED)
        if before in (NODE_SCHEDULED, NODE_FAILED):
            svc.notifier.emit('tenks.node.create.end', cluster,
                              node_payload(svc.db.get_node(self.node_uuid)))

    def revert(self, cluster, before, **kwargs):
        context.get().db.set_node_state(self.node_uuid, NODE_DEPLOYING)


class ForgetCluster(task.Task):
    """Delete the records of a cluster whose resources are all removed.

    Reversion strategy: none; it runs last, when nothing remains, and a
    record deleted is not worth bringing back.
    """

    def __init__(self):
        super().__init__(name='cluster:forget', requires=(base.CLUSTER,))

    def execute(self, cluster):
        svc = context.get()
        for node in svc.db.list_nodes(cluster=cluster):
            svc.db.delete_node(node.uuid)
            svc.notifier.emit('tenks.node.delete.end', cluster,
                              node_payload(node))
        svc.db.delete_cluster(cluster)

    def revert(self, result, **kwargs):
        pass
