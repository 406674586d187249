"""Post-deploy: Nova flavors for the nodes, then (optionally) the wait
until Placement reports them, then the nodes' resource providers joined
to their hypervisors' aggregates, then a check that bare metal and VMs
cannot land on each other's hosts."""

import time

from oslo_log import log as logging
from taskflow import task
from taskflow.patterns import linear_flow
from taskflow.patterns import unordered_flow

from flows import base
from flows import context
from flows import registration
from tenks import cloud
from tenks import exceptions
from tenks import placement_aggregates
from tenks import reconcile

LOG = logging.getLogger(__name__)

PLACEMENT_POLL = 1.0
PLACEMENT_VERSION = '1.18'  # 'required' traits in queries


def find_flavor(conn, name):
    """The flavor called ``name``, or None."""
    try:
        return conn.compute.find_flavor(name, ignore_missing=False)
    except cloud.sdk_exceptions().NotFoundException:
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


def remove_flavor(svc, name):
    conn = svc.cloud.connection
    flavor = find_flavor(conn, name)
    if flavor is None:
        return {'changed': False}
    conn.compute.delete_flavor(flavor)
    return {'changed': True}


class EnsureFlavor(base.EnsureResource):
    """A Nova flavor for one resource class.

    Reversion strategy: delete the flavor when this operation created
    it (see EnsureResource); one it changed gets ``old`` back.
    """

    kind = 'nova_flavor'

    def __init__(self, flavor, old=None):
        super().__init__(registration.CLOUD_HOST, flavor['name'], flavor,
                         {'name': flavor['name']})
        self.old = old

    def revert(self, result, operation_id, cluster, **kwargs):
        if not isinstance(result, dict) or result['new'] or not self.old:
            return super().revert(result, operation_id, cluster, **kwargs)
        try:
            ensure_flavor(context.get().cloud.connection, self.old, True)
        except Exception as e:
            LOG.warning('Could not give flavor %s its old values back while '
                        'reverting: %s', self.resource, e)

    def remove(self, svc, operation_id, cluster):
        return remove_flavor(svc, **self.remove_args)

    def ensure(self, svc, operation_id, cluster, adopt):
        try:
            changed = ensure_flavor(svc.cloud.connection, self.ensure_args,
                                    adopt)
        except cloud.sdk_exceptions().SDKException as e:
            raise exceptions.CloudError(
                service='Nova', action='create flavor %s' % self.resource,
                reason=str(e)) from e
        # Without a record, a flavor found there is refused.
        return {'changed': changed, 'created': not adopt}


def providers_offering(conn, resource_class, traits):
    """The uuids of the providers that offer a unit of
    ``resource_class`` and every trait in ``traits``."""
    # Placement refuses to query a class or trait it does not know yet:
    # nobody has reported it, so nobody offers it.
    for path in ['/resource_classes/%s' % resource_class] + [
            '/traits/%s' % trait for trait in traits]:
        if conn.placement.get(path, microversion=PLACEMENT_VERSION,
                              raise_exc=False).status_code == 404:
            return set()
    query = 'resources=%s:1' % resource_class
    if traits:
        query += '&required=%s' % ','.join(sorted(traits))
    response = conn.placement.get('/resource_providers?' + query,
                                  microversion=PLACEMENT_VERSION)
    response.raise_for_status()
    return {p['uuid'] for p in response.json()['resource_providers']}


class WaitForPlacement(task.Task):
    """Wait until, for every enrolled node, the node's own resource
    provider (nova-compute names it after the node) offers a unit of
    its class with its traits. A provider of the same class that is not
    one of these nodes' (another cluster's, or one nova-compute has not
    yet deleted after its node left Ironic) counts for nothing.

    Reversion strategy: none; it waits and changes nothing.
    """

    def __init__(self, wanted, timeout):
        super().__init__(name='placement:wait')
        # [(resource class, traits, {node uuid: node name})]
        self.wanted = wanted
        self.timeout = timeout

    def execute(self):
        conn = context.get().cloud.connection
        deadline = time.monotonic() + self.timeout
        while True:
            short = []
            for rc, traits, nodes in self.wanted:
                missing = sorted(nodes[uuid] for uuid in set(nodes) -
                                 providers_offering(conn, rc, traits))
                if missing:
                    short.append('%s%s: %d of %d nodes offer it (not yet %s)'
                                 % (rc, ' with %s' % ', '.join(traits)
                                    if traits else '',
                                    len(nodes) - len(missing), len(nodes),
                                    _some(missing)))
            if not short:
                return
            if time.monotonic() > deadline:
                raise exceptions.PlacementTimeout(timeout=self.timeout,
                                                  short='; '.join(short))
            time.sleep(PLACEMENT_POLL)

    def revert(self, result, **kwargs):
        pass


def _some(names, shown=5):
    """The first ``shown`` of ``names``, and how many more there are."""
    more = len(names) - shown
    return ', '.join(names[:shown]) + (' and %d more' % more
                                       if more > 0 else '')


class JoinAggregates(task.Task):
    """Put each enrolled node's resource provider into the Placement
    aggregates of its hypervisor's aggregates (see
    tenks.placement_aggregates), keeping the aggregates others set.

    nova-compute makes a provider some time after its node is
    available: with ``wait`` (seconds; the deploy waits for Placement),
    providers not there yet are waited for; without, they are named in
    a warning, and join at a running conductor's next pass, the next
    deploy or an aggregate change of their host.

    Advisory: a Placement that refuses or fails gives a warning, never
    a failed deploy (see tenks.placement_aggregates).

    Reversion strategy: none. The mirror follows the aggregates of the
    state database, whatever the deploy's outcome; the nodes' removal
    takes their providers out.
    """

    def __init__(self, nodes, wait=None):
        super().__init__(name='placement:aggregates')
        self.nodes = nodes  # {node uuid: name}
        self.wait = wait

    def execute(self):
        svc = context.get()
        return {'warnings': placement_aggregates.join(
            svc.db, svc.cloud.connection, self.nodes, self.wait,
            PLACEMENT_POLL)}

    def revert(self, result, **kwargs):
        pass


class CheckCoexistence(task.Task):
    """Warn where VMs could land on bare metal: a node's provider that
    still has standard inventory, or a bare-metal flavor asking for it.

    Advisory: it never fails the deploy. An answer it cannot use (an
    HTTP error, a body without the expected keys, no connection)
    becomes a warning naming the service, the status and what was not
    checked.

    Reversion strategy: none; it only reads.
    """

    def __init__(self, node_uuids, resource_classes):
        super().__init__(name='placement:check')
        self.node_uuids = node_uuids
        self.resource_classes = resource_classes

    def execute(self):
        conn = context.get().cloud.connection
        return {'warnings': coexistence_warnings(
            conn, self.node_uuids, self.resource_classes)}

    def revert(self, result, **kwargs):
        pass


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
                if rc in reconcile.STANDARD_CLASSES and inventory['total'] > 0)
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
    except cloud.sdk_exceptions().HttpException as e:
        raise Unchecked('answered HTTP %s to a flavor list' % (
            e.status_code,)) from e
    for flavor in flavors:
        specs = flavor.extra_specs or {}
        if not any(specs.get('resources:%s' % rc) for rc in
                   resource_classes):
            continue
        asked = sorted(rc for rc in reconcile.STANDARD_CLASSES
                       if specs.get('resources:%s' % rc) != '0')
        if asked:
            warnings.append(
                'Bare-metal flavor %s does not zero %s: it also asks '
                'for standard resources' % (flavor.name, ', '.join(asked)))
    return warnings


def post_deploy_flow(plan):
    """Flavors to make or change, then, when nodes were enrolled or
    changed in Ironic, the wait for Placement and the advisory check."""
    flow = linear_flow.Flow('post-deploy')
    flavors = unordered_flow.Flow('flavors')
    flavors.add(*[EnsureFlavor(f, plan['flavors']['old'].get(f['name']))
                  for f in plan['flavors']['ensure']])
    flow.add(flavors)
    if not any(entry['enrol'] for entry in plan['nodes']):
        return flow
    if plan['placement_wait']:
        flow.add(WaitForPlacement(plan['placement_wait'],
                                  plan['placement_timeout']))
    enrolled = [entry['new'] for entry in plan['nodes']
                if entry['new'] is not None and entry['new']['ironic']]
    flow.add(JoinAggregates(
        {n['uuid']: n['name'] for n in enrolled},
        plan['placement_timeout'] if plan['placement_wait'] else None))
    flow.add(CheckCoexistence([n['uuid'] for n in enrolled], sorted(
        {reconcile.normalise_resource_class(n['ironic']['rc'])
         for n in enrolled})))
    return flow
