"""The teardown flow, built from the recorded resources of a cluster."""

import functools

from taskflow import task
from taskflow.patterns import linear_flow

from flows import base
from flows import context
from flows import ledger
from flows import nodes
from flows import post_deploy
from flows import records
from flows import registration
from flows import stages
from tenks import constants
from tenks import states

# What lives in the cloud rather than on a hypervisor, by kind:
# remover(svc, **remove_args) -> {'changed': bool}.
CLOUD_REMOVERS = {
    'ironic_node': registration.remove_node,
    'nova_flavor': post_deploy.remove_flavor,
}


class RemoveResource(task.Task):
    """Remove one recorded thing, then its record.

    A thing found carrying no mark of this deployment (replaced by
    somebody else's of the same name) is left where it is; its record
    goes, and the operation's result warns about it.

    Reversion strategy: none. A removal is not undone; what is still
    recorded lets the next teardown finish the job.
    """

    def __init__(self, row):
        super().__init__(
            name='remove-%s:%s:%s' % (row['kind'], row['hypervisor'],
                                      row['name']),
            requires=(base.OPERATION_ID, base.CLUSTER))
        self.row = row

    def execute(self, operation_id, cluster):
        return remove(context.get(), self.row,
                      base.request_id(operation_id, self.name),
                      operation_id, cluster)

    def revert(self, result, **kwargs):
        pass


def removals(rows):
    """A RemoveResource for each resource dict of ``rows``, for the
    flows that remove recorded things (deploy, host setup, move)."""
    return [RemoveResource(row) for row in rows]


def remove(svc, row, request_id, operation_id, cluster):
    """Remove the thing of resource ``row`` (a dict), then its record;
    see RemoveResource. An agent's answer that comes after the request
    gave up forgets the record then (conductor.late)."""
    things = [(row['kind'], row['name'])]
    if row['kind'] in CLOUD_REMOVERS:
        request = functools.partial(CLOUD_REMOVERS[row['kind']], svc)
    else:
        request = functools.partial(
            svc.agents.request, row['hypervisor'], 'remove_' + row['kind'],
            request_id, operation=operation_id,
            late=base.late_remove(cluster, things))
    result, conflict = ledger.remove(svc, row['hypervisor'], things, request,
                                     **row['remove_args'])
    if conflict is not None:
        result = {'changed': False, 'warnings': [
            'Left %s %s on %s: it is no longer ours (%s); its record is '
            'dropped' % (row['kind'], row['name'], row['hypervisor'],
                         conflict)]}
    return result


def get_teardown_flow(operation_id):
    """Flow factory: the teardown planned for operation ``operation_id``
    (see conductor.planner.teardown_plan)."""
    plan = context.get().db.get_operation(operation_id).plan
    flow = linear_flow.Flow('teardown:%s' % plan['cluster'])
    # A plan saved before teardowns kept the cluster's state has none.
    flow.add(records.MarkCluster(states.CLUSTER_DELETING,
                                 plan.get('cluster_state')))
    for kinds in constants.REMOVAL_STAGES:
        stage = []
        if kinds == ('domain',):
            # A plan saved before teardowns took --force has no 'force'.
            stage += nodes.removal_tasks(plan['nodes'],
                                         plan.get('force', False))
        stage += [RemoveResource(row) for row in plan['others']
                  if row['kind'] in kinds]
        if stage:
            flow.add(stages.unordered('remove:%s' % '+'.join(kinds), stage))
    flow.add(records.ForgetCluster())
    return flow
