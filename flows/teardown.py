"""The teardown flow, built from the recorded resources of a cluster."""

from taskflow.patterns import linear_flow
from taskflow.patterns import unordered_flow

from flows import base
from flows import records

# What goes first: a BMC before its domain, a domain before its disks and
# ports, ports before their bridge, volumes before their pool.
REMOVAL_STAGES = (
    ('bmc',),
    ('domain',),
    ('volume', 'port'),
    ('uplink',),
    ('bridge',),
    ('pool',),
)


def get_teardown_flow(cluster, resources):
    """Flow factory. ``resources``: recorded rows as dicts."""
    flow = linear_flow.Flow('teardown:%s' % cluster)
    flow.add(records.MarkCluster(records.CLUSTER_DELETING))
    for kinds in REMOVAL_STAGES:
        stage = unordered_flow.Flow('remove:%s' % '+'.join(kinds))
        stage.add(*[base.RemoveResource(row) for row in resources
                    if row['kind'] in kinds])
        flow.add(stage)
    flow.add(records.ForgetCluster())
    return flow
