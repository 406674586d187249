"""Whether bare metal and VMs can land on each other's hosts: a node's
provider that still has standard inventory, or a bare-metal flavor
asking for it.

Advisory: an answer it cannot use (an HTTP error, a body without the
expected keys, no connection) becomes a warning naming the service, the
status and what was not checked, never an error.
"""

from oslo_log import log as logging

from tenks import constants
from tenks.cloud import connection

LOG = logging.getLogger(__name__)


class Unchecked(Exception):
    """An answer an advisory check cannot use; its message says why."""


def coexistence_warnings(conn, node_uuids, resource_classes):
    checks = [
        ('Placement', 'whether the nodes\' resource providers still offer '
         'VCPU, MEMORY_MB or DISK_GB', _provider_warnings,
         (conn, node_uuids)),
        ('Nova', 'whether bare-metal flavors ask for VCPU, MEMORY_MB or '
         'DISK_GB', _flavor_warnings, (conn, resource_classes)),
    ]
    warnings = []
    for service, what, check, args in checks:
        try:
            warnings += check(*args)
        except Exception as e:
            if not isinstance(e, Unchecked):
                LOG.debug('%s check failed', service, exc_info=True)
                e = 'could not be asked (%s: %s)' % (type(e).__name__, e)
            warnings.append('%s %s; did not check %s' % (service, e, what))
    return warnings


def _provider_warnings(conn, node_uuids):
    warnings = []
    if not conn.endpoint_for('placement'):
        return warnings
    for uuid in node_uuids:
        path = '/resource_providers/%s/inventories' % uuid
        response = conn.placement.get(path, raise_exc=False)
        if response.status_code == 404:
            continue  # not reported by nova-compute (yet)
        if response.status_code != 200:
            raise Unchecked('answered HTTP %d to GET %s' % (
                response.status_code, path))
        try:
            standard = sorted(
                rc for rc, inventory in response.json()[
                    'inventories'].items()
                if rc in constants.RESOURCE_CLASSES and inventory['total'] > 0)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise Unchecked(
                'answered HTTP %d to GET %s without the expected '
                'inventories (%s: %s)' % (response.status_code, path,
                                          type(e).__name__, e)) from e
        if standard:
            warnings.append(
                'Placement provider of node %s still offers %s: VM '
                'flavors can land on it' % (uuid, ', '.join(standard)))
    return warnings


def _flavor_warnings(conn, resource_classes):
    warnings = []
    if not conn.endpoint_for('compute'):
        return warnings
    try:
        flavors = list(conn.compute.flavors(details=True))
    except connection.sdk_exceptions().HttpException as e:
        raise Unchecked('answered HTTP %s to a flavor list' % (
            e.status_code,)) from e
    for flavor in flavors:
        specs = flavor.extra_specs or {}
        if not any(specs.get('resources:%s' % rc) for rc in
                   resource_classes):
            continue
        asked = sorted(rc for rc in constants.RESOURCE_CLASSES
                       if specs.get('resources:%s' % rc) != '0')
        if asked:
            warnings.append(
                'Bare-metal flavor %s does not zero %s: it also asks '
                'for standard resources' % (flavor.name, ', '.join(asked)))
    return warnings
