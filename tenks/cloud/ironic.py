"""Ironic: nodes, their ports and provision states.

A node reaches ``available`` only after Ironic has reached its BMC (the
``manage`` step checks the power credentials), so an available node is
one Ironic can really drive.
"""

import time
import uuid as uuidlib

import tenacity
from oslo_log import log as logging

from tenks import exceptions
from tenks import reconcile
from tenks import states
from tenks.cloud import connection

LOG = logging.getLogger(__name__)
INTERFACES = tuple('%s_interface' % i for i in (
    'bios', 'boot', 'console', 'deploy', 'firmware', 'inspect', 'management',
    'network', 'power', 'raid', 'rescue', 'storage', 'vendor'))
RESTRICTED = ('driver', 'resource_class')


def deployed(state):
    """Whether a node in provision state ``state`` (None: no node) must
    not be removed or resized without --force."""
    return state is not None and state not in states.IRONIC_FREE_STATES


def provision_states(conn, uuids):
    """{uuid: provision state, or None where Ironic has no such node},
    from one node list."""
    wanted = set(uuids)
    if not wanted:
        return {}
    found = {n.id: n.provision_state for n in conn.baremetal.nodes(
        fields=('uuid', 'provision_state')) if n.id in wanted}
    return {uuid: found.get(uuid) for uuid in uuids}


def deployed_nodes(conn, uuids, free_states):
    """{uuid: (provision state, instance uuid or None)} of the Ironic
    nodes among ``uuids`` in a provision state not in ``free_states``,
    from one node list."""
    wanted = set(uuids)
    if not wanted:
        return {}
    return {n.id: (n.provision_state, n.instance_id)
            for n in conn.baremetal.nodes(
                fields=('uuid', 'provision_state', 'instance_uuid'))
            if n.id in wanted and n.provision_state not in free_states}


def nodes_and_ports(conn):
    """({uuid: node}, {node uuid: [port]}) of every Ironic node and port,
    with their details, from one list of each."""
    nodes = {n.id: n for n in conn.baremetal.nodes(details=True)}
    ports = {}
    for port in conn.baremetal.ports(details=True):
        ports.setdefault(port.node_id, []).append(port)
    return nodes, ports


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
    return isinstance(error, connection.sdk_exceptions().HttpException) and (
        error.status_code == 409 or (error.status_code or 0) >= 500)


# ensure_node is idempotent: an attempt that failed half way can run again.
retrying = tenacity.retry(
    retry=tenacity.retry_if_exception(_transient), reraise=True,
    stop=tenacity.stop_after_attempt(5),
    wait=tenacity.wait_exponential(multiplier=0.5, max=5))


def ensure_node(conn, conf, node, traits, ports, adopt,
                password_changed=False):
    """The Ironic node ``node`` with ``traits`` and ``ports``, available.

    On a node that exists, every managed field that differs is updated
    in place: the fields of ``node`` (an interface it does not name goes
    back to the driver's default, as do an unnamed conductor group and
    shard), driver_info, traits (exactly these) and ports (made,
    updated, and those of other MACs deleted), then an enroll or
    manageable node is made available. A stored password reads back
    masked: driver_info is sent when another key differs, or when
    ``password_changed``. What Ironic would refuse in the node's
    provision state is refused first, with CloudError, before anything
    changes. True if anything changed.

    ``adopt`` False: a node found with this UUID is somebody else's. A
    node this call creates is deleted again if a later step fails,
    before the error is raised: nothing else would know to remove it.
    """
    try:
        current = conn.baremetal.get_node(node['id'])
    except connection.sdk_exceptions().NotFoundException:
        current = None
    if current is None:
        conn.baremetal.create_node(**node)
        try:
            if traits:
                conn.baremetal.set_node_traits(node['id'], traits)
            for port in ports:
                conn.baremetal.create_port(node_id=node['id'], **port)
            _settle_node(conn, conf, node)
        except Exception:
            _undo_node(conn, conf, node)
            raise
        return True
    if not adopt:
        raise exceptions.ResourceConflict(
            kind='Ironic node', name=node['id'], owner=node['name'],
            reason='Tenks has no record of creating it')
    updates = node_updates(current, node, _driver_defaults(
        conn, current, node), password_changed)
    port_changes = _port_changes(conn, node['id'], ports)
    _check_state(current, updates, port_changes)
    changed = bool(updates or any(port_changes.values()))
    if 'driver' in updates:
        # The interfaces of the old hardware type may not fit the new one:
        # reset them to its defaults, then set those the node names.
        conn.baremetal.patch_node(current, [_op('driver', updates.pop(
            'driver'))], reset_interfaces=True)
        updates.update(_interfaces(node, conn.baremetal.get_node(
            node['id']), {}))
    if updates:
        conn.baremetal.patch_node(
            current, [_op(k, v) for k, v in sorted(updates.items())])
    if sorted(current.traits or []) != sorted(traits):
        conn.baremetal.set_node_traits(node['id'], traits)
        changed = True
    _apply_ports(conn, current, node['id'], port_changes)
    return _settle_node(conn, conf, node) or changed


def enrol(conn, conf, name, node, traits, ports, adopt,
          password_changed=False):
    """ensure_node, tried again while Ironic is busy or failing for a
    moment (what an earlier attempt created is ours: later attempts
    adopt it); whether anything changed. CloudError naming node
    ``name`` when Ironic refuses."""
    attempts = []

    @retrying
    def attempt():
        attempts.append(True)
        return ensure_node(conn, conf, node, traits, ports,
                           adopt or len(attempts) > 1, password_changed)

    try:
        return attempt() or len(attempts) > 1
    except connection.sdk_exceptions().SDKException as e:
        raise exceptions.CloudError(
            service='Ironic', action='enrol node %s' % name,
            reason=str(e)) from e


# Properties Ironic fills in itself unless a node has them: the vendor its
# management interface detects when the node is verified.
DISCOVERED_PROPERTIES = ('vendor',)


def _properties(current, wanted):
    """The node's properties, less those Ironic discovered that Tenks
    does not set."""
    return {k: v for k, v in (current.properties or {}).items()
            if k in wanted or k not in DISCOVERED_PROPERTIES}


def node_updates(current, node, defaults, password_changed=False):
    """{field: new value} for each managed field of the Ironic node
    ``current`` that differs from ``node``; ``defaults``: the driver's
    default interfaces ({field: name}), for those ``node`` omits."""
    wanted = {k: v for k, v in node.items() if k not in ('id', 'driver_info')}
    wanted.setdefault('conductor_group', '')
    wanted.setdefault('shard', None)
    updates = {k: v for k, v in wanted.items()
               if k not in INTERFACES and (
                   _properties(current, v) if k == 'properties'
                   else getattr(current, k, None)) != v}
    if 'driver' not in updates:
        updates.update(_interfaces(node, current, defaults))
    have = current.driver_info or {}
    info = node['driver_info']
    if password_changed or set(have) != set(info) or any(
            str(have[k]) != str(v) for k, v in info.items()
            if not k.endswith('password')):
        updates['driver_info'] = info
    return updates


def _interfaces(node, current, defaults):
    wanted = dict(defaults, **{k: v for k, v in node.items()
                               if k in INTERFACES})
    return {k: v for k, v in wanted.items()
            if getattr(current, k, None) != v}


def _driver_defaults(conn, current, node):
    """The default interfaces of the node's driver, unless it changes
    (changing it resets them)."""
    if current.driver != node['driver']:
        return {}
    driver = conn.baremetal.get_driver(current.driver)
    return {k: getattr(driver, 'default_' + k) for k in INTERFACES
            if getattr(driver, 'default_' + k, None)}


def _op(field, value):
    if value is None:
        return {'op': 'remove', 'path': '/' + field}
    return {'op': 'add', 'path': '/' + field, 'value': value}


def _port_changes(conn, node_uuid, ports):
    existing = {p.address.lower(): p for p in conn.baremetal.ports(
        node_id=node_uuid, details=True)}
    wanted = {p['address'].lower(): p for p in ports}
    return {
        'create': [p for a, p in sorted(wanted.items())
                   if a not in existing],
        'update': [(existing[a], p) for a, p in sorted(wanted.items())
                   if a in existing and (
                       existing[a].physical_network != p['physical_network']
                       or existing[a].local_link_connection
                       != p['local_link_connection'])],
        'delete': [p for a, p in sorted(existing.items())
                   if a not in wanted],
    }


def _check_state(current, updates, port_changes):
    """CloudError naming what Ironic would refuse in the node's state."""
    state = current.provision_state
    if current.is_maintenance:
        return
    refused = [k for k in sorted(updates)
               if (k in RESTRICTED or k in INTERFACES)
               and state not in states.IRONIC_FIELD_STATES]
    if port_changes['update'] and state not in (
            states.IRONIC_PORT_STATES + (states.IRONIC_AVAILABLE,)):
        refused.append('ports %s (physical_network, local_link_connection)'
                       % ', '.join(p.address for p, _ in
                                   port_changes['update']))
    if refused:
        raise exceptions.CloudError(
            service='Ironic', action='update node %s (%s)' % (
                current.name, current.id),
            reason='%s cannot change in provision state %s' % (
                ', '.join(refused), state))


def _apply_ports(conn, current, node_uuid, changes):
    for port in changes['create']:
        conn.baremetal.create_port(node_id=node_uuid, **port)
    for port in changes['delete']:
        conn.baremetal.delete_port(port, ignore_missing=False)
    if not changes['update']:
        return
    window = (current.provision_state not in states.IRONIC_PORT_STATES
              and not current.is_maintenance)
    if window:
        conn.baremetal.set_node_maintenance(
            node_uuid, reason='Tenks: updating port connectivity')
    try:
        for port, wanted in changes['update']:
            conn.baremetal.update_port(
                port, physical_network=wanted['physical_network'],
                local_link_connection=wanted['local_link_connection'])
    finally:
        if window:
            conn.baremetal.unset_node_maintenance(node_uuid)


def _settle_node(conn, conf, node):
    """Manage and provide an enroll or manageable node; True if it
    moved."""
    state = conn.baremetal.get_node(node['id']).provision_state
    if state == states.IRONIC_ENROLL:
        conn.baremetal.set_node_provision_state(node['id'], 'manage')
        _wait(conn, node['id'], states.IRONIC_MANAGEABLE,
              conf.provision_timeout, conf.poll_interval)
        state = states.IRONIC_MANAGEABLE
    if state == states.IRONIC_MANAGEABLE:
        conn.baremetal.set_node_provision_state(node['id'], 'provide')
        _wait(conn, node['id'], states.IRONIC_AVAILABLE,
              conf.provision_timeout, conf.poll_interval)
        return True
    return False


def delete_node(conn, conf, uuid, force=False):
    """Delete the node (and so its ports) once no state change runs on
    it; False if there is none.

    Ironic deletes a node it has deployed (active...) only in
    maintenance; ``force`` (a deploy forced to remove it) puts it there
    first. Otherwise Ironic's refusal is the error.
    """
    deadline = time.monotonic() + conf.provision_timeout
    while True:
        try:
            node = conn.baremetal.get_node(uuid)
        except connection.sdk_exceptions().NotFoundException:
            return False
        if not node.target_provision_state or time.monotonic() > deadline:
            break
        time.sleep(conf.poll_interval)
    if force and deployed(node.provision_state) and not node.is_maintenance:
        conn.baremetal.set_node_maintenance(
            uuid, reason='removed by a forced Tenks deploy')
    conn.baremetal.delete_node(uuid)
    return True


def _undo_node(conn, conf, node):
    try:
        retrying(delete_node)(conn, conf, node['id'])
    except Exception:
        LOG.warning('Could not delete Ironic node %s (%s), created by an '
                    'enrolment that failed', node['name'], node['id'],
                    exc_info=True)


def bmc_driver_info(bmc, spec):
    """The driver_info keys Ironic reaches the BMC ``bmc`` (a view's)
    with, the password from ``spec``."""
    if bmc['type'] == 'redfish':
        return {
            'redfish_address': reconcile.redfish_url(bmc),
            'redfish_system_id': '/redfish/v1/Systems/%s' % bmc['system_id'],
            'redfish_username': bmc['username'],
            'redfish_password': spec['redfish_password'],
            'redfish_verify_ca': spec.get('redfish_verify_ca', True),
        }
    return {
        'ipmi_address': bmc['address'],
        'ipmi_port': bmc['port'],
        'ipmi_username': bmc['username'],
        'ipmi_password': spec['ipmi_password'],
    }
