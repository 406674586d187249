"""Conductor-side tasks that move clusters and nodes through states."""

from taskflow import task

from flows import base
from flows import context
from flows import ledger
from tenks import notifier
from tenks import states

# What a deploy may change of a node's record.
RECORD_FIELDS = ('node_type', 'vcpus', 'memory_mb', 'volumes', 'nics',
                 'bmc_type', 'bmc_address', 'bmc_port', 'bmc_system_id',
                 'boot_mode', 'secure_boot', 'console_log')


def settle_new_node(db, node_uuid):
    """Forget a node whose first deploy failed, unless some of its
    resources remain recorded; whether it was forgotten."""
    if db.list_resources(node=node_uuid):
        db.set_node_state(node_uuid, states.NODE_FAILED)
        return False
    db.delete_node(node_uuid)
    return True


class MarkCluster(task.Task):
    """Move the cluster to ``state``; return the state it had.

    Reversion strategy: a cluster this operation scheduled is forgotten
    with its nodes that never started, unless some of its resources could
    not be removed; a deployed cluster whose reconfiguration was rolled
    back whole (nothing this operation made stays recorded) is deployed
    still; one whose state this task failed to change (no later task
    ran) gets back the state it had; any other is marked failed (a
    teardown that failed may have removed some of it), so a failed
    operation never leaves it looking busy or healthy, and a re-run or a
    teardown can finish.
    """

    def __init__(self, state, previous=None):
        """``previous``: the state the cluster had when the flow was
        built, if known (saves reading it)."""
        super().__init__(name='cluster:%s' % state,
                         requires=(base.OPERATION_ID, base.CLUSTER))
        self.state = state
        self.previous = previous

    def execute(self, operation_id, cluster):
        db = context.get().db
        previous = self.previous or db.get_cluster(cluster).state
        db.set_cluster_state(cluster, self.state)
        return previous

    def revert(self, result, operation_id, cluster, **kwargs):
        db = context.get().db
        for node in db.list_nodes(cluster=cluster):
            if node.state == states.NODE_SCHEDULED:
                settle_new_node(db, node.uuid)
        failed_here = not isinstance(result, str)
        if failed_here:
            result = self.previous
        if (result == states.CLUSTER_SCHEDULED
                and not db.list_resources(cluster)):
            db.delete_cluster(cluster)
        elif failed_here and result is not None:
            db.set_cluster_state(cluster, result)
        elif (result == states.CLUSTER_DEPLOYED
                and self.state == states.CLUSTER_DEPLOYING
                and not db.list_resources(cluster, operation=operation_id)
                and all(node.state == states.NODE_DEPLOYED
                        for node in db.list_nodes(cluster=cluster))):
            db.set_cluster_state(cluster, states.CLUSTER_DEPLOYED)
        else:
            db.set_cluster_state(cluster, states.CLUSTER_FAILED)


def finish_node(svc, cluster, record, announce):
    """Record a node (a dict) as its operation left it, deployed; announce
    it if this operation created it."""
    svc.db.record_node(record['uuid'], state=states.NODE_DEPLOYED, **{
        k: record[k] for k in RECORD_FIELDS})
    if announce:
        svc.notifier.emit('tenks.node.create.end', cluster,
                          notifier.node_payload(record))


def forget_nodes(svc, cluster, nodes):
    """Delete the records of nodes whose resources are all removed, and
    record their events in the same transaction, with the records of
    their last ones removed (``nodes``: [(uuid, host, things)], see
    ledger.forget_nodes); then send the events."""
    events = ledger.forget_nodes(svc, nodes, lambda node: svc.notifier.event(
        'tenks.node.delete.end', cluster, notifier.node_payload(node)))
    for event in events:
        if event is not None:
            svc.notifier.send(event)


class CommitSpec(task.Task):
    """Record the spec the deploy applied, each node's entry in it, and
    the cluster deployed.

    Reversion strategy: none; it runs last.
    """

    def __init__(self, spec, spec_indexes):
        super().__init__(name='cluster:commit',
                         requires=(base.OPERATION_ID, base.CLUSTER))
        self.spec = spec
        self.spec_indexes = spec_indexes

    def execute(self, operation_id, cluster):
        context.get().db.commit_cluster(
            cluster, self.spec, states.CLUSTER_DEPLOYED, self.spec_indexes)

    def revert(self, result, **kwargs):
        pass


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
                              notifier.node_payload(node))
        svc.db.delete_cluster(cluster)

    def revert(self, result, **kwargs):
        pass
