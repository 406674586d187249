"""Post-deploy: Nova flavors for the nodes, then (optionally) the wait
until Placement reports them, then the nodes' resource providers joined
to their hypervisors' aggregates, then a check that bare metal and VMs
cannot land on each other's hosts."""

from oslo_log import log as logging
from taskflow import task
from taskflow.patterns import linear_flow
from taskflow.patterns import unordered_flow

from flows import base
from flows import context
from tenks import constants
from tenks import reconcile
from tenks.cloud import coexistence
from tenks.cloud import nova
from tenks.cloud import placement
from tenks.cloud import placement_aggregates

LOG = logging.getLogger(__name__)

PLACEMENT_POLL = 1.0


def remove_flavor(svc, name):
    return {'changed': nova.delete_flavor(svc.cloud.connection, name)}


class EnsureFlavor(base.EnsureResource):
    """A Nova flavor for one resource class.

    Reversion strategy: delete the flavor when this operation created
    it (see EnsureResource); one it changed gets ``old`` back.
    """

    kind = 'nova_flavor'

    def __init__(self, flavor, old=None):
        super().__init__(constants.CLOUD_HOST, flavor['name'], flavor,
                         {'name': flavor['name']})
        self.old = old

    def revert(self, result, operation_id, cluster, **kwargs):
        if not isinstance(result, dict) or result['new'] or not self.old:
            return super().revert(result, operation_id, cluster, **kwargs)
        try:
            nova.ensure_flavor(context.get().cloud.connection, self.old,
                               True)
        except Exception as e:
            LOG.warning('Could not give flavor %s its old values back while '
                        'reverting: %s', self.resource, e)

    def remove(self, svc, operation_id, cluster):
        return remove_flavor(svc, **self.remove_args)

    def ensure(self, svc, operation_id, cluster, adopt):
        changed = nova.make_flavor(svc.cloud.connection, self.ensure_args,
                                   adopt)
        # Without a record, a flavor found there is refused.
        return {'changed': changed, 'created': not adopt}


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
        placement.wait_for_offers(context.get().cloud.connection,
                                  self.wanted, self.timeout, PLACEMENT_POLL)

    def revert(self, result, **kwargs):
        pass


class JoinAggregates(task.Task):
    """Put each enrolled node's resource provider into the Placement
    aggregates of its hypervisor's aggregates (see
    tenks.cloud.placement_aggregates), keeping the aggregates others set.

    nova-compute makes a provider some time after its node is
    available: with ``wait`` (seconds; the deploy waits for Placement),
    providers not there yet are waited for; without, they are named in
    a warning, and join at a running conductor's next pass, the next
    deploy or an aggregate change of their host.

    Advisory: a Placement that refuses or fails gives a warning, never
    a failed deploy (see tenks.cloud.placement_aggregates).

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

    Advisory: it never fails the deploy (see tenks.cloud.coexistence).

    Reversion strategy: none; it only reads.
    """

    def __init__(self, node_uuids, resource_classes):
        super().__init__(name='placement:check')
        self.node_uuids = node_uuids
        self.resource_classes = resource_classes

    def execute(self):
        conn = context.get().cloud.connection
        return {'warnings': coexistence.coexistence_warnings(
            conn, self.node_uuids, self.resource_classes)}

    def revert(self, result, **kwargs):
        pass


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
