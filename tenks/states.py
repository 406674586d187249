"""States of clusters and nodes, as recorded in the state database."""

CLUSTER_SCHEDULED = 'scheduled'
CLUSTER_DEPLOYING = 'deploying'
CLUSTER_DEPLOYED = 'deployed'
CLUSTER_FAILED = 'failed'
CLUSTER_DELETING = 'deleting'
NODE_SCHEDULED = 'scheduled'
NODE_DEPLOYED = 'deployed'
# Its first deploy failed and left resources that could not be removed:
# kept (name, UUID, MACs) so a re-run or a teardown can finish.
NODE_FAILED = 'failed'
