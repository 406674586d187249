"""Registration: each node in Ironic, with its ports, made available.

A node reaches ``available`` only after Ironic has reached its BMC (the
``manage`` step checks the power credentials), so an available node is
one Ironic can really drive.
"""

import time
import uuid as uuidlib

import tenacity
from oslo_log import log as logging

from flows import base
from flows import context
from flows import records
from tenks import cloud
from tenks import exceptions

LOG = logging.getLogger(__name__)
CLOUD_HOST = 'openstack'
# Fields of a node that registration manages, besides interfaces.
NODE_FIELDS = ('name', 'driver', 'properties', 'resource_class',
               'conductor_group', 'shard')


def normalise_resource_class(name):
    """Placement's class for an Ironic resource class: CUSTOM_<NAME>."""
    normal = ''.join(c if c.isalnum() else '_' for c in name.upper())
    return normal if normal.startswith('CUSTOM_') else 'CUSTOM_' + normal


def resolve_image(conn, value):
    """A deploy image as Ironic wants it: URL or Glance UUID kept, a
    Glance name resolved."""
    if value is None or '://' in value:
        return value
    try:
        uuidlib.UUID(value)
        return value
    except ValueError:
        pass
    try:
        return conn.image.find_image(value, ignore_missing=False).id
    except Exception as e:
        raise exceptions.CloudError(
            service='Glance', action='find deploy image %s' % value,
            reason='%s (give a URL or a UUID where there is no Glance)'
            % e) from e


def _wait(conn, node_uuid, target, timeout, interval):
    deadline = time.monotonic() + timeout
    while True:
        node = conn.baremetal.get_node(node_uuid)
        if node.provision_state == target and not (
                node.target_provision_state):
            return node
        if node.last_error and not node.target_provision_state:
            raise exceptions.CloudError(
                service='Ironic', action='move node %s to %s' % (
                    node.name, target), reason=node.last_error)
        if time.monotonic() > deadline:
            raise exceptions.CloudError(
                service='Ironic', action='move node %s to %s' % (
                    node.name, target),
                reason='still %s after %d s' % (node.provision_state,
                                                timeout))
        time.sleep(interval)


def _transient(error):
    """Ironic busy (node locked) or failing for a moment (5xx)."""
    return isinstance(error, cloud.sdk_exceptions().HttpException) and (
        error.status_code == 409 or (error.status_code or 0) >= 500)


# ensure_node is idempotent: an attempt that failed half way can run again.
_retrying = tenacity.retry(
    retry=tenacity.retry_if_exception(_transient), reraise=True,
    stop=tenacity.stop_after_attempt(5),
    wait=tenacity.wait_exponential(multiplier=0.5, max=5))


def ensure_node(conn, conf, node, traits, ports, adopt):
    """The Ironic node ``node`` with ``traits`` and ``ports``, available.

    Only what differs is changed on a node that exists. ``adopt`` False:
    a node found with this UUID is somebody else's. A node this call
    creates is deleted again if a later step fails, before the error is
    raised: nothing else would know to remove it.
    """
    try:
        current = conn.baremetal.get_node(node['id'])
    except cloud.sdk_exceptions().NotFoundException:
        current = None
    if current is None:
        current = conn.baremetal.create_node(**node)
        try:
            _settle_node(conn, conf, node, current, traits, ports)
        except Exception:
            _undo_node(conn, conf, node)
            raise
        return True
    if not adopt:
        raise exceptions.ResourceConflict(
            kind='Ironic node', name=node['id'], owner=node['name'],
            reason='Tenks has no record of creating it')
    changed = False
    updates = {k: v for k, v in node.items()
               if k not in ('id', 'driver_info')
               and getattr(current, k, None) != v}
    info = {k: v for k, v in node['driver_info'].items()
            if current.driver_info.get(k) != v
            and not k.endswith('password')}
    if info:
        # A stored password reads back masked: send it with any change.
        updates['driver_info'] = node['driver_info']
    if updates:
        conn.baremetal.update_node(current, **updates)
        changed = True
    return _settle_node(conn, conf, node, current, traits, ports) or changed


def _settle_node(conn, conf, node, current, traits, ports):
    """Traits, ports, then manage and provide; True if any changed."""
    changed = False
    if sorted(current.traits or []) != sorted(traits):
        conn.baremetal.set_node_traits(node['id'], traits)
        changed = True
    changed = _ensure_ports(conn, node['id'], ports) or changed
    state = conn.baremetal.get_node(node['id']).provision_state
    if state == 'enroll':
        conn.baremetal.set_node_provision_state(node['id'], 'manage')
        _wait(conn, node['id'], 'manageable', conf.provision_timeout,
              conf.poll_interval)
        state = 'manageable'
        changed = True
    if state == 'manageable':
        conn.baremetal.set_node_provision_state(node['id'], 'provide')
        _wait(conn, node['id'], 'available', conf.provision_timeout,
              conf.poll_interval)
        changed = True
    return changed


def _ensure_ports(conn, node_uuid, ports):
    changed = False
    existing = {p.address: p for p in conn.baremetal.ports(
        node_id=node_uuid, details=True)}
    for port in ports:
        current = existing.get(port['address'])
        if current is None:
            conn.baremetal.create_port(node_id=node_uuid, **port)
            changed = True
        elif (current.physical_network != port['physical_network']
              or current.local_link_connection
              != port['local_link_connection']):
            conn.baremetal.update_port(
                current, physical_network=port['physical_network'],
                local_link_connection=port['local_link_connection'])
            changed = True
    return changed


def delete_node(conn, conf, uuid):
    """Delete the node (and so its ports) once no state change runs on
    it; False if there is none."""
    deadline = time.monotonic() + conf.provision_timeout
    while True:
        try:
            node = conn.baremetal.get_node(uuid)
        except cloud.sdk_exceptions().NotFoundException:
            return False
        if not node.target_provision_state or time.monotonic() > deadline:
            break
        time.sleep(conf.poll_interval)
    conn.baremetal.delete_node(uuid)
    return True


def _undo_node(conn, conf, node):
    try:
        _retrying(delete_node)(conn, conf, node['id'])
    except Exception:
        LOG.warning('Could not delete Ironic node %s (%s), created by an '
                    'enrolment that failed', node['name'], node['id'],
                    exc_info=True)


def remove_node(svc, uuid):
    """Delete the node (and so its ports)."""
    return {'changed': delete_node(svc.cloud.connection, svc.cloud.conf,
                                   uuid)}


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
        super().__init__(CLOUD_HOST, entry['uuid'], entry['new']['ironic'],
                         {'uuid': entry['uuid']}, entry['uuid'])
        self.entry = entry
        self.finishes = finishes

    def remove(self, svc, operation_id):
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
        spec = svc.db.get_operation(operation_id).spec
        return self._ensure(svc, self.entry['new'], self.ensure_args, spec,
                            adopt)

    def _ensure(self, svc, view, config, spec, adopt):
        """``config``: {'fields', 'traits', 'rc'} of ``view``."""
        node = view['record']
        conn = svc.cloud.connection
        driver_info = {
            'ipmi_address': node['bmc_address'],
            'ipmi_port': node['bmc_port'],
            'ipmi_username': spec['ipmi_username'],
            'ipmi_password': spec['ipmi_password'],
        }
        for key in ('deploy_kernel', 'deploy_ramdisk'):
            image = resolve_image(conn, spec.get(key))
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
        attempts = []

        @_retrying
        def attempt():
            # What an earlier attempt of this task created is ours.
            attempts.append(True)
            return ensure_node(conn, svc.cloud.conf, fields,
                               config['traits'], ports,
                               adopt or len(attempts) > 1)

        try:
            changed = attempt() or len(attempts) > 1
        except cloud.sdk_exceptions().SDKException as e:
            raise exceptions.CloudError(
                service='Ironic', action='enrol node %s' % node['name'],
                reason=str(e)) from e
        # Without a record, a node found there is refused: any node now
        # there was created by this task.
        return {'changed': changed, 'created': not adopt}
