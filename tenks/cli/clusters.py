"""``tenks cluster list|show``."""

from tenks.cli import client
from tenks.cli import columns
from tenks.cli.base import Lister
from tenks.cli.base import ShowOne

CLUSTER_COLUMNS = ('name', 'state', 'created_at', 'updated_at')


class ClusterList(Lister):
    """List the clusters."""

    def take_action(self, args):
        with client.connect(self.app.conf, read_only=True) as tenks:
            clusters = tenks.list_clusters()
        return CLUSTER_COLUMNS, [tuple(c[k] for k in CLUSTER_COLUMNS)
                                 for c in clusters]


class ClusterShow(ShowOne):
    """Show a cluster: state, spec (password masked) and nodes."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('cluster', help='Cluster name.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, read_only=True) as tenks:
            cluster = tenks.get_cluster(args.cluster)
        # Whatever else the record holds (its uuid, ...) between the
        # state and the spec.
        fields = CLUSTER_COLUMNS + tuple(
            k for k in cluster if k not in CLUSTER_COLUMNS + (
                'spec', 'nodes')) + ('spec', 'nodes')
        row = dict(cluster, spec=columns.SpecColumn(cluster['spec']),
                   nodes=columns.ListColumn(
                       [n['name'] for n in cluster['nodes']]))
        return fields, tuple(row[k] for k in fields)
