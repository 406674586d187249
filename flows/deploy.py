"""The deploy flow: host setup, network setup, every node (with its
registration), then post-deploy (flavors, Placement)."""

from taskflow.patterns import linear_flow

from flows import host_setup
from flows import network_setup
from flows import nodes
from flows import post_deploy
from flows import records


def get_deploy_flow(plan):
    """Flow factory (module level: a jobboard saves it by import path).

    ``plan``: JSON built by conductor.plans.deploy_plan.
    """
    flow = linear_flow.Flow('deploy:%s' % plan['cluster'])
    flow.add(
        records.MarkCluster(records.CLUSTER_DEPLOYING),
        host_setup.host_setup_flow(plan),
        network_setup.network_setup_flow(plan),
        nodes.nodes_flow(plan),
    )
    if plan['flavors'] or any(n.get('ironic') for n in plan['nodes']):
        flow.add(post_deploy.post_deploy_flow(plan))
    flow.add(records.MarkCluster(records.CLUSTER_DEPLOYED))
    return flow
