"""Tasks shared by every phase, and the names of the store's keys."""

from taskflow import task

from flows import context
from flows import ledger
from tenks import exceptions
from tenks.db import api as db_api

# Store keys: JSON values only, injected when a flow is loaded.
OPERATION_ID = 'operation_id'
CLUSTER = 'cluster'


def request_id(operation_id, atom_name, phase='execute'):
    """Stable across retries and resumes of the same operation."""
    return '%s/%s/%s' % (operation_id, atom_name, phase)


def late_ensure(cluster, things):
    """What an agent request that makes ``things`` ([(kind, name)]) of
    ``cluster`` does to their records when it answers after its task gave
    up waiting: those made are recorded present (conductor.late)."""
    return {'cluster': cluster, 'effects': [
        (kind, name, db_api.ENSURE) for kind, name in things]}


def late_remove(cluster, things):
    """The same for a request that removes ``things``: they, and a node
    left with nothing, are forgotten."""
    return {'cluster': cluster, 'effects': [
        (kind, name, db_api.REMOVE) for kind, name in things]}


class EnsureResource(task.Task):
    """Create one thing on a hypervisor through its hostagent.

    Its record follows the ledger's rules (flows.ledger): 'creating'
    before the request, 'present' once the agent answers, credited to
    this operation only if this request created it.

    Reversion strategy: remove only what this operation created: what
    the agent said it created, or what it was asked to create without an
    answer (a timeout, a crash) or with an error (an agent that failed
    half way may not have undone it: libvirt gone), removed by owner
    mark; its record goes or stays as the ledger says.
    """

    kind = None

    def __init__(self, host, resource, ensure_args, remove_args,
                 node_uuid=None, new=False):
        super().__init__(name='%s:%s:%s' % (self.kind, host, resource),
                         requires=(OPERATION_ID, CLUSTER))
        self.host = host
        self.resource = resource
        self.ensure_args = ensure_args
        self.remove_args = remove_args
        self.node_uuid = node_uuid
        # Not recorded when the flow was built: most likely not recorded
        # when it runs either.
        self.new = new

    def request_args(self, cluster):
        """Arguments of ensure_<kind>; secrets may be added here."""
        return self.ensure_args

    def ensure(self, svc, operation_id, cluster, adopt):
        """Create or check the thing; return {'changed': bool,
        'created': bool, ...}.

        ``adopt`` is False when nothing was recorded: a thing found there
        then is somebody else's. Hypervisor things carry owner marks, so
        only other places (a cloud) need it.
        """
        return svc.agents.request(
            self.host, 'ensure_' + self.kind,
            request_id(operation_id, self.name), operation=operation_id,
            late=late_ensure(cluster, [(self.kind, self.resource)]),
            **self.request_args(cluster))

    def remove(self, svc, operation_id, cluster):
        return svc.agents.request(
            self.host, 'remove_' + self.kind,
            request_id(operation_id, self.name, 'revert'),
            operation=operation_id,
            late=late_remove(cluster, [(self.kind, self.resource)]),
            **self.remove_args)

    def execute(self, operation_id, cluster):
        svc = context.get()
        key = (self.kind, self.resource)
        wanted = [(self.kind, self.resource, self.remove_args)]
        before = ledger.begin(svc, cluster, self.host, operation_id, wanted,
                              node=self.node_uuid, new=self.new)
        try:
            result = self.ensure(svc, operation_id, cluster,
                                 adopt=key in before)
        except exceptions.ResourceConflict:
            # Somebody else's is there: this request made nothing.
            ledger.drop_unrecorded(svc, self.host, wanted, before)
            raise
        credit = ledger.finish_one(svc, self.host, self.kind, self.resource,
                                   before.get(key), result['created'],
                                   operation_id, result)
        return dict(result, new=credit == operation_id)

    def revert(self, result, operation_id, cluster, **kwargs):
        svc = context.get()
        if isinstance(result, dict):
            if not result['new']:
                return
        else:
            # It failed, or never finished (result None): the record says
            # whether this operation may have created the thing.
            row = svc.db.get_resource(self.host, self.kind, self.resource)
            if row is None or row.operation != operation_id:
                return
        ledger.remove_or_keep(
            svc, self.host, [(self.kind, self.resource)],
            '%s %s on %s' % (self.kind, self.resource, self.host),
            self.remove, svc, operation_id, cluster)
