"""Tenks' aggregates mirrored in Placement, for the bare-metal nodes.

The resource provider of an enrolled node (its UUID is the Ironic
node's, and nova-compute makes it) is a member of the Placement
aggregates whose UUIDs are those of its hypervisor's Tenks aggregates,
as Nova mirrors its host aggregates onto compute hosts' providers. So
``GET /resource_providers?member_of=<aggregate uuid>`` finds the nodes
of a failure domain.

What Tenks touches, and nothing else: the providers of its own
enrolled nodes (it never creates one), and on them only the aggregate
UUIDs of its own aggregates. Every change re-reads the provider's
aggregates and sends them back whole with the provider's generation:
aggregates somebody else set stay, and a change made in between makes
Placement answer 409, after which the merge starts again.

Advisory: the nodes, their VMs and their Ironic records are whole
without this mirror, and it can be redone at any time (a deploy, an
aggregate change of the host, a running conductor's next pass). So a
Placement that cannot be reached, refuses (401, 403) or keeps
conflicting never fails or undoes an operation: every such answer
becomes a warning naming the service, the status and the node.
"""

import dataclasses
import time

from oslo_log import log as logging

from tenks import constants

LOG = logging.getLogger(__name__)

ATTEMPTS = 5  # merges tried against concurrent writers (409)
# What a warning says of a provider Placement refused to change.
IN_STEP = ('may not be in its hypervisor\'s aggregates: run the deploy '
           'again to retry')
LEFT = 'may still be in Tenks\' aggregates'


class Failed(Exception):
    """An answer the mirror cannot use; its message says which."""


def enrolled(db, host=None, cluster=None):
    """{node uuid: hypervisor} of the nodes Tenks enrolled in Ironic
    (on ``host``, of ``cluster``)."""
    uuids = {r.name for r in db.list_resources(cluster, kind='ironic_node')}
    if not uuids:
        return {}
    return {n.uuid: n.hypervisor for n in db.list_nodes(cluster, host)
            if n.uuid in uuids}


def wanted(db, host, gone=()):
    """(aggregate UUIDs a node on ``host`` belongs to, every UUID Tenks
    mirrors), from the state database; ``gone``: UUIDs of aggregates
    being deleted, mirrored but wanted by nobody."""
    aggregates = db.list_aggregates()
    mine = {a['uuid'] for a in aggregates if host in a['hosts']}
    return mine - set(gone), {a['uuid'] for a in aggregates} | set(gone)


def _wanted(db, uuid, host, gone):
    """wanted() for node ``uuid``; none once its Ironic record is gone
    (the node is being removed: its provider leaves)."""
    if db.get_resource(constants.CLOUD_HOST, 'ironic_node', uuid) is None:
        return (), wanted(db, None, gone)[1]
    return wanted(db, host, gone)


def reachable(conn):
    """Whether the cloud's catalogue has a Placement endpoint."""
    return bool(conn.endpoint_for('placement'))


def _path(uuid):
    return '/resource_providers/%s/aggregates' % uuid


def _answer(response, method, path):
    raise Failed('answered HTTP %d to %s %s' % (response.status_code,
                                                method, path))


def provider_aggregates(conn, uuid):
    """(set of aggregate UUIDs, generation) of the provider ``uuid``, or
    None when Placement has no such provider."""
    path = _path(uuid)
    response = conn.placement.get(
        path, microversion=constants.PLACEMENT_PROVIDER_AGGREGATES,
        raise_exc=False)
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        _answer(response, 'GET', path)
    try:
        body = response.json()
        return set(body['aggregates']), body['resource_provider_generation']
    except (ValueError, KeyError, TypeError) as e:
        raise Failed('answered HTTP 200 to GET %s without aggregates and '
                     'a generation (%s: %s)' % (path, type(e).__name__,
                                                e)) from e


def members(conn, aggregate_uuid):
    """UUIDs of the providers in the Placement aggregate."""
    path = '/resource_providers?member_of=%s' % aggregate_uuid
    response = conn.placement.get(
        path, microversion=constants.PLACEMENT_PROVIDER_AGGREGATES,
        raise_exc=False)
    if response.status_code != 200:
        _answer(response, 'GET', path)
    try:
        return {p['uuid'] for p in response.json()['resource_providers']}
    except (ValueError, KeyError, TypeError) as e:
        raise Failed('answered HTTP 200 to GET %s without providers (%s: '
                     '%s)' % (path, type(e).__name__, e)) from e


def out_of_step(conn, aggregates, nodes):
    """The nodes of ``nodes`` ({uuid: hypervisor}) whose providers are
    not in exactly their hypervisor's ``aggregates`` (as
    list_aggregates gives them) among these; a node whose provider does
    not exist counts when it should be in one. One member_of query per
    aggregate."""
    have, wanted_by_host = {}, {}
    for aggregate in aggregates:
        for uuid in members(conn, aggregate['uuid']) & nodes.keys():
            have.setdefault(uuid, set()).add(aggregate['uuid'])
        for host in aggregate['hosts']:
            wanted_by_host.setdefault(host, set()).add(aggregate['uuid'])
    return {uuid: host for uuid, host in nodes.items()
            if have.get(uuid, set()) != wanted_by_host.get(host, set())}


def merge(conn, uuid, want):
    """Bring the provider ``uuid``'s mirrored aggregates to what
    ``want()`` ((wanted UUIDs, mirrored UUIDs)) says, keeping the
    others. True if it changed, False if it was in step, None when
    Placement has no such provider.

    ``want`` is asked after each read of the provider, so that of two
    concurrent merges the one Placement takes last read the latest
    state database.
    """
    path = _path(uuid)
    for _ in range(ATTEMPTS):
        found = provider_aggregates(conn, uuid)
        if found is None:
            return None
        have, generation = found
        wanted_now, mirrored = want()
        new = (have - set(mirrored)) | set(wanted_now)
        if new == have:
            return False
        response = conn.placement.put(path, json={
            'aggregates': sorted(new),
            'resource_provider_generation': generation},
            microversion=constants.PLACEMENT_PROVIDER_AGGREGATES,
            raise_exc=False)
        if response.status_code == 200:
            return True
        if response.status_code not in (404, 409):
            _answer(response, 'PUT', path)
        # 409: somebody changed the provider since it was read; 404: it
        # went (nova-compute deleted it): read it again.
    raise Failed('kept answering HTTP 409 (a concurrent change) to PUT %s '
                 'after %d attempts' % (path, ATTEMPTS))


@dataclasses.dataclass
class SyncResult:
    """What a sync did: ``changed`` and ``missing`` (no provider yet)
    node UUIDs, and ``warnings``."""

    changed: list = dataclasses.field(default_factory=list)
    missing: list = dataclasses.field(default_factory=list)
    warnings: list = dataclasses.field(default_factory=list)


def sync(db, conn, nodes, gone=(), names=None):
    """Bring the providers of ``nodes`` ({node uuid: hypervisor}) to
    their hypervisors' aggregates; ``gone``: UUIDs of aggregates being
    deleted. ``names``: {node uuid: name}, for the warnings. Nothing is
    asked of Placement while Tenks has no aggregate.

    Returns a SyncResult (``missing``: nodes that should be in an
    aggregate and have no provider yet); never raises for Placement's
    answers.
    """
    outcome = SyncResult()
    names = names or {}
    if not nodes or not (gone or db.list_aggregates()):
        return outcome
    for uuid, host in sorted(nodes.items(),
                             key=lambda n: (names.get(n[0], n[0]), n[0])):
        try:
            changed = merge(conn, uuid,
                            lambda u=uuid, h=host: _wanted(db, u, h, gone))
        except Exception as e:
            outcome.warnings.append(warning(
                e, names.get(uuid, uuid), uuid, IN_STEP))
            continue
        if changed is None and wanted(db, host, gone)[0]:
            outcome.missing.append(uuid)
        elif changed:
            outcome.changed.append(uuid)
    return outcome


def leave(db, conn, uuid, name=None):
    """Take the provider of node ``uuid`` out of every aggregate Tenks
    mirrors (the node is going); the others stay. A list of warnings."""
    if not db.list_aggregates():
        return []
    try:
        if conn.endpoint_for('placement'):
            merge(conn, uuid, lambda: ((), wanted(db, None)[1]))
    except Exception as e:
        return [warning(e, name or uuid, uuid, LEFT)]
    return []


def warning(error, name, uuid, what):
    if not isinstance(error, Failed):
        LOG.debug('Placement aggregates of %s failed', uuid, exc_info=True)
        error = 'could not be asked (%s: %s)' % (type(error).__name__,
                                                 error)
    return 'Placement %s; the resource provider of node %s (%s) %s' % (
        error, name, uuid, what)


def join(db, conn, names, wait=None, interval=1.0):
    """After a deploy: the providers of the enrolled nodes among
    ``names`` ({node uuid: name}) joined to their hypervisors'
    aggregates; ``wait``: seconds to wait for providers nova-compute
    has not made yet. The list of warnings."""
    if not db.list_aggregates():
        return []
    try:
        if not conn.endpoint_for('placement'):
            return []
    except Exception as e:
        return ['Placement could not be found (%s); did not put the nodes\' '
                'resource providers into their aggregates' % e]
    nodes = {uuid: host for uuid, host in enrolled(db).items()
             if uuid in names}
    outcome = sync(db, conn, nodes, names=names)
    warnings = outcome.warnings
    if outcome.missing and wait:
        wait_for_providers(conn, outcome.missing, wait, interval)
        outcome = sync(db, conn, {u: nodes[u] for u in outcome.missing},
                       names=names)
        warnings += outcome.warnings
    return warnings + [
        'Placement has no resource provider yet for node %s (%s; '
        'nova-compute makes it): it is not in its hypervisor\'s '
        'aggregates, and joins them at the conductor\'s next pass, '
        'deploy or aggregate change of its host (wait_for_placement '
        'waits for it)'
        % (names[uuid], uuid) for uuid in outcome.missing]


def wait_for_providers(conn, uuids, timeout, interval=1.0):
    """Wait until Placement has a provider for each of ``uuids`` (as
    nova-compute makes them); the list of those still missing after
    ``timeout`` seconds. Placement's errors count as missing."""
    deadline = time.monotonic() + timeout
    missing = list(uuids)
    while True:
        still = []
        for uuid in missing:
            try:
                if provider_aggregates(conn, uuid) is None:
                    still.append(uuid)
            except Exception:
                still.append(uuid)
        missing = still
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(interval)
