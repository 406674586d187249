"""The ledger: how the records of the state database follow the requests
that make and remove recorded things. Every task that makes or removes
one goes through it; these are its rules.

Making: each thing a request may create is recorded 'creating',
credited to the operation, before the request (``begin``), so that a
crash between the two leaves a record. A request refused before the
agent changed anything made nothing: the records it added go
(``drop_unrecorded``), those there before stay. On any other error every
record stays, for the revert: without an answer the agent may have made
the things, and one that answers with an error may have failed to undo
them. Once the agent answers, each thing is recorded 'present'
(``finish``, ``finish_one``) and credited (``credit``) to the operation
that created it: that operation's revert removes it, no other's does.

Removing (``remove``): the records of things removed go (a node's
last ones with the node's record: ``request_removal``, ``forget_nodes``).
A thing found not ours (ResourceConflict: somebody else's now has its
name) is left where it is, and its record goes too: it was never ours
to remove. A removal that fails otherwise keeps the records, so that a
re-run or a teardown can finish the job; a revert logs it and goes on
(``remove_or_keep``).
"""

from oslo_log import log as logging

from tenks import exceptions
from tenks import states

LOG = logging.getLogger(__name__)


def begin(svc, cluster, host, operation_id, wanted, node=None, new=False):
    """Record the things ``wanted`` ([(kind, name, remove args)]) on
    ``host`` that are not recorded yet, 'creating' and credited to the
    operation; see StateDB.begin_resources. Returns {(kind, name): row
    dict} of those recorded before the request."""
    return svc.db.begin_resources(cluster, host, operation_id, wanted,
                                  node=node, new=new)


def drop_unrecorded(svc, host, wanted, before):
    """A request that ``begin`` preceded was refused before the agent
    changed anything: forget what it recorded, not what ``before``
    holds."""
    svc.db.delete_resources(host, [(kind, name) for kind, name, _ in wanted
                                   if (kind, name) not in before])


def credit(row, created, operation_id, keep_others=False):
    """The operation a thing is credited to once the agent answered
    (None: no operation's revert removes it).

    ``row``: its record before the request (a dict, or None);
    ``created``: whether the answer says this request created it.

    A thing recorded 'present' before keeps its credit: one re-created
    because it had gone only restores what its record says. One created
    by this request, or asked for before by this operation (recorded
    'creating' and credited to it: a retry or a resume, whose agent may
    since have forgotten that it created it), is credited to this
    operation. Any other gets no credit, unless ``keep_others``: then a
    record another operation left 'creating' keeps that credit.

    ``keep_others`` is the rule of the tasks that make one thing
    (base.EnsureResource); those that make a node's things never kept
    it. The two differ in the record only: no operation but the running
    one runs again (an interrupted deploy is resumed before, or closed
    by, any other), and every reader of a credit compares it with its
    own operation, so neither rule lets a revert touch the thing.
    """
    if row is None:
        return operation_id if created else None
    if row['state'] == states.RESOURCE_PRESENT:
        return row['operation']
    # 'creating', the only other state a record has.
    if created or row['operation'] == operation_id:
        return operation_id
    return row['operation'] if keep_others else None


def finish(svc, host, wanted, before, created, operation_id, removed=()):
    """Record the things ``wanted`` present, credited by ``credit``, and
    forget those ``removed``, once the agent answered; ``created`` and
    ``removed``: the (kind, name) the answer says it created and
    removed."""
    svc.db.finish_resources(host, {
        (kind, name): credit(before.get((kind, name)),
                             (kind, name) in created, operation_id)
        for kind, name, _ in wanted}, removed)


def finish_one(svc, host, kind, name, row, created, operation_id, answer):
    """Record one thing present, with the agent's ``answer`` as its data,
    credited by ``credit`` with ``keep_others``; ``row``: its record
    before the request. Returns its credit."""
    owner = credit(row, created, operation_id, keep_others=True)
    svc.db.finish_resource(host, kind, name, answer, owner)
    return owner


def restore(svc, host, wanted, before, removed):
    """Record present the things ``wanted`` that a revert made again, and
    forget those ``removed``. They were part of what the revert gives
    back, so none is credited to the operation for being made now: each
    keeps the credit its record had (none if it had no record)."""
    svc.db.finish_resources(
        host, {(kind, name): before[(kind, name)]['operation']
               if (kind, name) in before else None
               for kind, name, _ in wanted}, removed)


def remove(svc, host, things, request, /, *args, **kwargs):
    """Remove ``things`` ([(kind, name)]) on ``host`` with ``request(*args,
    **kwargs)``, then forget their records.

    Returns (the request's answer, None), or (None, the ResourceConflict)
    when the request found something not ours, left in place. Any other
    error is raised, the records kept.
    """
    answer, conflict = request_removal(request, *args, **kwargs)
    forget(svc, host, things)
    return answer, conflict


def forget(svc, host, things):
    """Forget the records of ``things`` ([(kind, name)]) on ``host``, once
    their removal was answered (or found them not ours)."""
    svc.db.delete_resources(host, things)


def request_removal(request, /, *args, **kwargs):
    """``remove`` without forgetting the records, which the caller does
    next: ``forget_nodes`` forgets a node's last ones with the node's
    record, in one transaction."""
    try:
        return request(*args, **kwargs), None
    except exceptions.ResourceConflict as e:
        return None, e


def forget_nodes(svc, nodes, event):
    """Forget the records of ``nodes`` ([(uuid, host, things)]), recording
    each one's ``event``, each with the records of its ``things`` ([(kind,
    name)]) on ``host`` that ``request_removal`` removed, in one
    transaction; see StateDB.forget_nodes."""
    return svc.db.forget_nodes(nodes, event)


def remove_or_keep(svc, host, things, what, request, /, *args, **kwargs):
    """``remove`` for a revert: it logs what it leaves (``what``, e.g.
    'pool p on hv1'), and what it could not remove stays recorded."""
    try:
        _, conflict = remove(svc, host, things, request, *args, **kwargs)
    except Exception as e:
        LOG.warning('Could not remove %s while reverting: %s; it stays '
                    'recorded', what, e)
        return
    if conflict is not None:
        LOG.warning('Leaving %s while reverting: %s', what, conflict)
