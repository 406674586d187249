"""What callers see of the records: operations, clusters, nodes and
events as the conductor's API returns them (the embedded conductor, and
the CLI's read-only commands reading the state database alone)."""

from tenks import constants
from tenks import exceptions


class Records:
    """Views of the state database ``db`` (a StateDB; None: there is
    none yet, so nothing is recorded)."""

    def __init__(self, db):
        self.db = db

    def _rows(self, method, *args):
        return [] if self.db is None else getattr(self.db, method)(*args)

    def get_operation(self, operation_id):
        operation = self.db and self.db.get_operation(operation_id,
                                                      plan=False)
        if operation is None:
            raise exceptions.OperationNotFound(id=operation_id)
        return operation.as_dict()

    def list_operations(self, cluster=None):
        return [o.as_dict() for o in (
            [] if self.db is None else self.db.list_operations(
                cluster, plan=False))]

    def get_cluster(self, name):
        cluster = self.db and self.db.get_cluster(name)
        if cluster is None:
            raise exceptions.ClusterNotFound(name=name)
        return dict(cluster.as_dict(), nodes=self.list_nodes(name))

    def list_clusters(self):
        return [c.as_dict() for c in self._rows('list_clusters')]

    def list_nodes(self, cluster=None, limit=None, marker=None,
                   sort_key=None, sort_dir=None):
        """The nodes (of ``cluster``), paged and sorted as
        StateDB.list_nodes says; ListingInvalid for a bad argument."""
        problems = []
        if limit is not None and (
                not isinstance(limit, int) or isinstance(limit, bool)
                or limit < 1):
            problems.append('limit %r is not a whole number above 0' % (
                limit,))
        if sort_key is not None and (
                sort_key not in constants.NODE_SORT_KEYS):
            problems.append('sort key %r is not one of %s' % (
                sort_key, ', '.join(constants.NODE_SORT_KEYS)))
        if sort_dir not in (None, 'asc', 'desc'):
            problems.append("sort direction %r is not 'asc' or 'desc'"
                            % (sort_dir,))
        if problems:
            raise exceptions.ListingInvalid(what='nodes',
                                            reason='; '.join(problems))
        return [n.as_dict() for n in self._rows(
            'list_nodes', cluster, None, limit, marker, sort_key,
            sort_dir or 'asc')]

    def list_events(self, cluster=None, limit=100):
        return [e.as_dict() for e in self._rows('list_events', cluster,
                                                limit)]
