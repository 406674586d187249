"""Nova: the flavors of the nodes' resource classes, and servers."""

from oslo_log import log as logging

from tenks import exceptions
from tenks.cloud import connection

LOG = logging.getLogger(__name__)


def find_flavor(conn, name):
    """The flavor called ``name``, or None."""
    try:
        return conn.compute.find_flavor(name, ignore_missing=False)
    except connection.sdk_exceptions().NotFoundException:
        return None


def ensure_flavor(conn, flavor, adopt):
    """Create the flavor, or fix its extra specs; True if it changed.

    A flavor this call creates is deleted again if its extra specs
    fail, before the error is raised.
    """
    current = find_flavor(conn, flavor['name'])
    if current is not None and not adopt:
        raise exceptions.ResourceConflict(
            kind='Nova flavor', name=flavor['name'], owner='this cluster',
            reason='Tenks has no record of creating it')
    sizes = {k: flavor[k] for k in ('vcpus', 'ram', 'disk')}
    if current is not None and any(
            getattr(current, k) != v for k, v in sizes.items()):
        # Flavors cannot change size: replace it.
        conn.compute.delete_flavor(current)
        current = None
    if current is None:
        current = conn.compute.create_flavor(name=flavor['name'], **sizes)
        try:
            conn.compute.create_flavor_extra_specs(current,
                                                   flavor['extra_specs'])
        except Exception:
            try:
                conn.compute.delete_flavor(current)
            except Exception:
                LOG.warning('Could not delete flavor %s, created by a '
                            'request that failed', flavor['name'],
                            exc_info=True)
            raise
        return True
    have = conn.compute.fetch_flavor_extra_specs(current).extra_specs or {}
    wanted = flavor['extra_specs']
    changed = {k: v for k, v in wanted.items() if have.get(k) != v}
    if changed:
        conn.compute.create_flavor_extra_specs(current, changed)
    for key in set(have) - set(wanted):
        conn.compute.delete_flavor_extra_specs_property(current, key)
    return bool(changed) or bool(set(have) - set(wanted))


def make_flavor(conn, flavor, adopt):
    """ensure_flavor; CloudError naming the flavor when Nova refuses."""
    from keystoneauth1 import exceptions as ksa_exceptions
    with connection.named_errors('Nova', 'create flavor %s' % flavor['name']):
        try:
            return ensure_flavor(conn, flavor, adopt)
        except ksa_exceptions.ConnectFailure:
            # The connection closed under a POST (connection.
            # resend_when_dropped sends only idempotent requests again):
            # Nova may have made the flavor, which is then ours.
            LOG.info('Nova connection dropped while making flavor %s; '
                     'trying again', flavor['name'])
            ensure_flavor(conn, flavor, adopt=True)
            return True


def delete_flavor(conn, name):
    """Delete the flavor called ``name``; False if there is none."""
    flavor = find_flavor(conn, name)
    if flavor is None:
        return False
    conn.compute.delete_flavor(flavor)
    return True


def flavor_changes(conn, current, wanted):
    """What differs of Nova's flavor ``current`` from ``wanted``
    (reconcile.nova_flavor)."""
    changes = [key for key in ('vcpus', 'ram', 'disk')
               if getattr(current, key) != wanted[key]]
    have = conn.compute.fetch_flavor_extra_specs(current).extra_specs or {}
    return changes + ['extra spec %s' % key for key in sorted(
        set(have) | set(wanted['extra_specs']))
        if have.get(key) != wanted['extra_specs'].get(key)]


def server_name(conn, server_id):
    """The name of Nova server ``server_id``; None when Nova cannot say
    (no compute endpoint, no such server, an error)."""
    sdk = connection.sdk_exceptions()
    try:
        if not conn.endpoint_for('compute'):
            return None
        return conn.compute.get_server(server_id).name
    except sdk.SDKException:
        return None
