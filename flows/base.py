"""Tasks shared by every phase, and the names of the store's keys."""

from oslo_log import log as logging
from taskflow import task

from conductor import services
from tenks import exceptions
from tenks.db import api as db_api

LOG = logging.getLogger(__name__)

# Store keys: JSON values only, injected when a flow is loaded.
OPERATION_ID = 'operation_id'
CLUSTER = 'cluster'


def request_id(operation_id, atom_name, phase='execute'):
    """Stable across retries and resumes of the same operation."""
    return '%s/%s/%s' % (operation_id, atom_name, phase)


class EnsureResource(task.Task):
    """Create one thing on a hypervisor through its hostagent.

    The thing is recorded as 'creating' before the request and 'present'
    after it, so teardown finds it even if the conductor dies between
    the two.

    Reversion strategy: remove the thing and its record when this task
    recorded it; leave alone what was recorded before this operation (a
    thing this task re-created because it had gone is kept too: that
    only restores what the record says).
    """

    kind = None

    def __init__(self, host, resource, ensure_args, remove_args):
        super().__init__(name='%s:%s:%s' % (self.kind, host, resource),
                         requires=(OPERATION_ID, CLUSTER))
        self.host = host
        self.resource = resource
        self.ensure_args = ensure_args
        self.remove_args = remove_args

    def request_args(self, cluster):
        """Arguments of ensure_<kind>; secrets may be added here."""
        return self.ensure_args

    def ensure(self, svc, operation_id, cluster, adopt):
        """Create or check the thing; return {'changed': bool, ...}.

        ``adopt`` is False when nothing was recorded: a thing found there
        then is somebody else's. Hypervisor things carry owner marks, so
        only other places (a cloud) need it.
        """
        return svc.agents.request(
            self.host, 'ensure_' + self.kind,
            request_id(operation_id, self.name),
            **self.request_args(cluster))

    def remove(self, svc, operation_id):
        return svc.agents.request(
            self.host, 'remove_' + self.kind,
            request_id(operation_id, self.name, 'revert'),
            **self.remove_args)

    def execute(self, operation_id, cluster):
        svc = services.get()
        before = svc.db.begin_resource(cluster, self.host, self.kind,
                                       self.resource, self.remove_args)
        try:
            result = self.ensure(svc, operation_id, cluster,
                                 adopt=before is not None)
        except exceptions.ResourceConflict:
            # It belongs to somebody else: nothing of ours to remove.
            if before is None:
                svc.db.delete_resource(self.host, self.kind, self.resource)
            raise
        svc.db.finish_resource(self.host, self.kind, self.resource, result)
        return dict(result, new=before != db_api.RESOURCE_PRESENT)

    def revert(self, result, operation_id, cluster, **kwargs):
        svc = services.get()
        if isinstance(result, dict):
            if not result['new']:
                return
        else:
            # It failed, or never finished (result None): the record says
            # whether this operation had started creating the thing.
            row = svc.db.get_resource(self.host, self.kind, self.resource)
            if row is None or row.state != db_api.RESOURCE_CREATING:
                return
        try:
            self.remove(svc, operation_id)
        except Exception as e:
            # Keep the record so a teardown can finish the job.
            LOG.warning('Could not remove %s %s on %s while reverting: %s',
                        self.kind, self.resource, self.host, e)
            return
        svc.db.delete_resource(self.host, self.kind, self.resource)
