"""The deploy flow, built from an operation's plan (tenks.reconcile).

Host setup, then every node created or changed (in batches of one
hypervisor's nodes, each batch followed by its nodes' enrolments),
post-deploy (flavors, Placement), then the removals, last so
that a failure before them removes nothing; then the new spec recorded.
The factory takes only the operation id and reads the plan from the
state database, so what TaskFlow saves stays small and a resume builds
the same flow again.
"""

from taskflow.patterns import linear_flow

from flows import context
from flows import host_setup
from flows import nodes
from flows import post_deploy
from flows import records
from flows import registration
from flows import stages
from flows import teardown
from tenks import constants
from tenks import reconcile
from tenks import states


def get_deploy_flow(operation_id):
    """Flow factory (module level: it is saved by import path)."""
    db = context.get().db
    operation = db.get_operation(operation_id)
    plan, spec = operation.plan, operation.spec
    flow = linear_flow.Flow('deploy:%s' % plan['cluster'])
    flow.add(records.MarkCluster(states.CLUSTER_DEPLOYING,
                                 plan['cluster_state']))
    if plan['host_ensure']:
        flow.add(host_setup.host_setup_flow(plan['host_ensure']))
    passwords = reconcile.bmc_passwords(spec)
    flow.add(stages.unordered('nodes', node_flows(plan['nodes'], passwords,
                                                  plan['force'])))
    if plan['flavors']['ensure'] or any(e['enrol'] for e in plan['nodes']):
        flow.add(post_deploy.post_deploy_flow(plan))
    if (plan['host_remove'] or plan['flavors']['remove'] or plan['unenrol']
            or any(entry['new'] is None for entry in plan['nodes'])):
        flow.add(removal_flow(plan, db.list_resources(plan['cluster'])))
    flow.add(records.CommitSpec(spec, reconcile.moved(plan)))
    return flow


def node_flows(entries, passwords, force):
    """Each batch of nodes that have something on a hypervisor, then
    their enrolments; the enrolment alone of a node that has not."""
    flows = []
    for task in nodes.converge_tasks(
            [entry for entry in entries if entry['agent']], passwords,
            force):
        enrol = [registration.EnsureIronicNode(entry, finishes=True)
                 for entry in task.entries if entry['enrol']]
        flows.append(linear_flow.Flow('node-flow:%s' % task.name).add(
            task, stages.unordered('enrol:%s' % task.name, enrol))
            if enrol else task)
    flows += [registration.EnsureIronicNode(entry, finishes=True)
              for entry in entries if entry['enrol'] and not entry['agent']]
    return flows


def removal_flow(plan, resources):
    """Nodes, flavors, then host things the plan no longer has."""
    by_node = {}
    for row in resources:
        by_node.setdefault(row.node, []).append(row.as_dict())
    flow = linear_flow.Flow('removals')
    stage = nodes.removal_tasks(
        [{'uuid': entry['uuid'], 'name': entry['name'],
          'hypervisor': entry['hypervisor'],
          'rows': by_node.get(entry['uuid'], [])}
         for entry in plan['nodes'] if entry['new'] is None],
        force=plan['force'])
    gone = {('nova_flavor', name) for name in plan['flavors']['remove']}
    gone.update(('ironic_node', uuid) for uuid in plan['unenrol'])
    stage += teardown.removals([row.as_dict() for row in resources
                                if (row.kind, row.name) in gone])
    if stage:
        flow.add(stages.unordered('remove:nodes', stage))
    flow.add(*host_removal(plan['host_remove']))
    return flow


def host_removal(rows):
    """Stages removing the host things ``rows`` (resource dicts), in
    constants.HOST_REMOVAL order."""
    removals = []
    for kind in constants.HOST_REMOVAL:
        mine = [row for row in rows if row['kind'] == kind]
        if mine:
            removals.append(stages.unordered('remove:%s' % kind,
                                         teardown.removals(mine)))
    return removals
