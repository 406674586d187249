"""Registration: each node in Ironic, with its ports, made available
(tenks.cloud.ironic does it)."""

from oslo_log import log as logging

from flows import base
from flows import context
from flows import ledger
from flows import records
from tenks import constants
from tenks.cloud import ironic
from tenks.cloud import placement_aggregates

LOG = logging.getLogger(__name__)


def remove_node(svc, uuid, force=False):
    """Delete the node (and so its ports) and its record, then take its
    resource provider out of Tenks' aggregates (warnings if Placement
    fails: nova-compute deletes the provider anyway). Without the
    record, no pass of the aggregate mirror puts it back."""
    conn = svc.cloud.connection
    # An Ironic node is ours by its record, not by a mark: deleting it
    # finds no conflict.
    changed, _ = ledger.remove(
        svc, constants.CLOUD_HOST, [('ironic_node', uuid)],
        ironic.retrying(ironic.delete_node), conn, svc.cloud.conf, uuid, force)
    return {'changed': changed,
            'warnings': placement_aggregates.leave(svc.db, conn, uuid)}


class EnsureIronicNode(base.EnsureResource):
    """Enrol one node in Ironic and make it available, or bring its
    Ironic node to the node's new view.

    ``entry``: a node of the plan ({'uuid', 'action', 'old', 'new'}).
    ``finishes``: this task is the node's last, so it marks the node
    deployed (and announces a node it created).

    Reversion strategy: delete the node (its ports go with it) when this
    operation created it (see EnsureResource); an Ironic node it changed
    gets its old view back.
    """

    kind = 'ironic_node'

    def __init__(self, entry, finishes):
        super().__init__(constants.CLOUD_HOST, entry['uuid'],
                         entry['new']['ironic'], {'uuid': entry['uuid']},
                         entry['uuid'])
        self.entry = entry
        self.finishes = finishes

    def remove(self, svc, operation_id, cluster):
        return remove_node(svc, **self.remove_args)

    def execute(self, operation_id, cluster):
        result = super().execute(operation_id, cluster)
        if self.finishes:
            records.finish_node(context.get(), cluster,
                                self.entry['new']['record'],
                                announce=self.entry['action'] == 'create')
        return result

    def revert(self, result, operation_id, cluster, **kwargs):
        old = self.entry['old']
        if not isinstance(result, dict) or result['new'] or not (
                old and old['ironic']):
            return super().revert(result, operation_id, cluster, **kwargs)
        svc = context.get()
        try:
            self._ensure(svc, old, old['ironic'], svc.db.get_cluster(
                cluster).spec, adopt=True)
        except Exception as e:
            LOG.warning('Could not give Ironic node %s its old fields back '
                        'while reverting: %s', old['name'], e)

    def ensure(self, svc, operation_id, cluster, adopt):
        # Not its plan: that holds every node of the cluster.
        spec = svc.db.get_operation(operation_id, plan=False).spec
        return self._ensure(svc, self.entry['new'], self.ensure_args, spec,
                            adopt)

    def _ensure(self, svc, view, config, spec, adopt):
        """``config``: {'fields', 'traits', 'rc'} of ``view``."""
        node = view['record']
        conn = svc.cloud.connection
        driver_info = ironic.bmc_driver_info(view['bmc'], spec)
        for key in ('deploy_kernel', 'deploy_ramdisk'):
            image = ironic.resolve_image(conn, svc.cloud.conf,
                                         spec.get(key))
            if image:
                driver_info[key] = image
        fields = dict(config['fields'], id=node['uuid'],
                      driver_info=driver_info)
        ports = []
        for nic in node['nics']:
            bridge = svc.db.get_resource(node['hypervisor'], 'bridge',
                                         nic['bridge'])
            ports.append({
                'address': nic['mac'],
                'physical_network': nic['physnet'],
                'local_link_connection': {
                    'switch_id': bridge.data['mac'],
                    'switch_info': nic['bridge'],
                    'port_id': nic['tap'],
                },
            })
        changed = ironic.enrol(conn, svc.cloud.conf, node['name'], fields,
                               config['traits'], ports, adopt,
                               self.entry.get('password_changed', False))
        # Without a record, a node found there is refused: any node now
        # there was created by this task.
        return {'changed': changed, 'created': not adopt}
