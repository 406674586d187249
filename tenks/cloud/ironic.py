"""Ironic: nodes, their ports and provision states.

A node reaches ``available`` only after Ironic has reached its BMC (the
``manage`` step checks the power credentials), so an available node is
one Ironic can really drive.

At scale: each connection has one Client (``client``), whose calls to
Ironic are bounded (``[openstack] ironic_concurrency``) and whose
StatePoller watches every node in transition with one node list per
``poll_interval``, instead of a GET per node. A new node costs its
create, its traits (if any), its ports, manage and provide.
"""

import copy
import threading
import time
import types
import uuid as uuidlib
import weakref

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


# How long a lookup that is the same for every node of an operation (a
# Glance image by name, a driver's default interfaces) is reused.
LOOKUP_SECONDS = 60


# Ironic answers these with 409 only for what no retry mends: a node's
# UUID or name taken, a port's MAC taken (a port is made under a shared
# lock of its node, which a state change does not refuse).
CREATES = ('create_node', 'create_port')


def _conflicts_not_retried(proxy):
    """``proxy`` with openstacksdk's retries of a 409 taken off, for
    CREATES: openstacksdk tries every 409 of the baremetal service again
    for 15.5 s (for a node locked by a state change, where it helps). A
    copy of the adapter, sharing its session and endpoint, with the
    other codes (503...) kept."""
    codes = getattr(proxy, 'retriable_status_codes', None)
    if not codes or 409 not in codes:
        return proxy
    creating = copy.copy(proxy)
    creating.retriable_status_codes = [c for c in codes if c != 409]
    return creating


class Bounded:
    """A proxy (conn.baremetal) with at most ``limit`` calls in flight;
    a list is read whole inside its call. CREATES are not tried again
    on a 409 (_conflicts_not_retried)."""

    def __init__(self, proxy, limit):
        self._proxy = proxy
        self._creating = _conflicts_not_retried(proxy)
        self._slots = threading.BoundedSemaphore(limit)

    def __getattr__(self, name):
        method = getattr(self._creating if name in CREATES
                         else self._proxy, name)

        def call(*args, **kwargs):
            with self._slots:
                result = method(*args, **kwargs)
                if isinstance(result, types.GeneratorType):
                    result = list(result)
                return result
        return call


class _Waiter:

    def __init__(self):
        self.since = time.monotonic()
        self.node = None
        self.done = threading.Event()


class StatePoller:
    """Waits for nodes in transition: one thread lists every node's
    provision state, target and last error once per ``interval`` (or
    per time the last list took, if longer) while anybody waits, and
    wakes each waiter whose node is at rest (no target provision state)
    or gone. It runs only while there are waiters."""

    FIELDS = ('uuid', 'provision_state', 'target_provision_state',
              'last_error', 'maintenance')

    def __init__(self, baremetal, interval):
        self._baremetal = baremetal
        self._interval = interval
        self._lock = threading.Lock()
        self._waiters = {}  # node uuid: [_Waiter]
        self._thread = None
        self.polls = 0

    def wait(self, uuid, timeout):
        """The node (uuid, provision_state, target_provision_state,
        last_error, is_maintenance) once at rest, listed after this
        call began; the last one seen if ``timeout`` seconds pass first
        (still moving); None if Ironic lists no such node."""
        waiter = _Waiter()
        with self._lock:
            self._waiters.setdefault(uuid, []).append(waiter)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name='ironic-poller', daemon=True)
                self._thread.start()
        waiter.done.wait(timeout)
        with self._lock:
            waiters = self._waiters.get(uuid, [])
            if waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiters[uuid]
        return waiter.node

    def _run(self):
        pause = self._interval
        while True:
            time.sleep(pause)
            with self._lock:
                if not self._waiters:
                    self._thread = None
                    return
            started = time.monotonic()
            try:
                nodes = {n.id: n for n in self._baremetal.nodes(
                    fields=self.FIELDS)}
            except Exception:
                # Waiters time out if Ironic stays unreachable.
                LOG.warning('Could not list the Ironic nodes in '
                            'transition', exc_info=True)
                continue
            finally:
                # A busy Ironic lists slowly: list no more than half the
                # time, leaving it the rest for the work waited for.
                pause = max(self._interval, time.monotonic() - started)
            self.polls += 1
            with self._lock:
                for uuid, waiters in list(self._waiters.items()):
                    node = nodes.get(uuid)
                    # One that began after the list did may not be in it.
                    seen = [w for w in waiters if w.since <= started]
                    for waiter in seen:
                        waiter.node = node
                    if node is not None and node.target_provision_state:
                        continue
                    for waiter in seen:
                        waiter.done.set()
                        waiters.remove(waiter)
                    if not waiters:
                        del self._waiters[uuid]


class Client:
    """What every node of a connection shares: bounded calls
    (``baremetal``), one StatePoller (its list the one call beyond the
    bound), lookups kept LOOKUP_SECONDS."""

    def __init__(self, conn, conf):
        self.conn = conn
        self.baremetal = Bounded(conn.baremetal, conf.ironic_concurrency)
        # Not behind the bound: queued behind the calls of hundreds of
        # nodes, the one list that wakes them all would come late.
        self.poller = StatePoller(Bounded(conn.baremetal, 1),
                                  conf.poll_interval)
        self._lookups = {}
        self._lock = threading.Lock()

    def lookup(self, key, find):
        """``find()``, or what it gave for ``key`` less than
        LOOKUP_SECONDS ago."""
        # One lookup at a time: the nodes that wait for it share it.
        with self._lock:
            now = time.monotonic()
            found = self._lookups.get(key)
            if found is None or found[0] <= now:
                found = self._lookups[key] = (now + LOOKUP_SECONDS, find())
            return found[1]


_clients = weakref.WeakKeyDictionary()
_clients_lock = threading.Lock()


def client(conn, conf):
    """The Client of connection ``conn``, made on first use."""
    with _clients_lock:
        found = _clients.get(conn)
        if found is None:
            found = _clients[conn] = Client(conn, conf)
        return found


def resolve_image(conn, conf, value):
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
        return client(conn, conf).lookup(
            ('image', value),
            lambda: conn.image.find_image(value, ignore_missing=False).id)
    except Exception as e:
        raise exceptions.CloudError(
            service='Glance', action='find deploy image %s' % value,
            reason='%s (give a URL or a UUID where there is no Glance)'
            % e) from e


def _wait(ironic, node, target, timeout):
    """Wait for the node's transition to ``target`` to end; CloudError
    if it ends elsewhere, or not in ``timeout`` seconds."""
    found = ironic.poller.wait(node['id'], timeout)
    action = 'move node %s to %s' % (node['name'], target)
    if found is None:
        raise exceptions.CloudError(service='Ironic', action=action,
                                    reason='Ironic no longer has it')
    if found.target_provision_state:
        raise exceptions.CloudError(
            service='Ironic', action=action,
            reason='still %s after %d s' % (found.provision_state, timeout))
    if found.provision_state != target:
        raise exceptions.CloudError(
            service='Ironic', action=action,
            reason=found.last_error or 'it ended in %s'
            % found.provision_state)


def _transient(error):
    """Ironic busy (a node locked, a state change under way) or failing
    for a moment (5xx), or the connection closed under a request (a
    POST or PATCH: connection.resend_when_dropped sends only idempotent
    ones again); not a conflict that stays: a MAC or name that another
    port or node has "already exists" (openstacksdk has already tried
    such a request again for 15 s)."""
    from keystoneauth1 import exceptions as ksa_exceptions
    if isinstance(error, ksa_exceptions.ConnectFailure):
        return True
    if not isinstance(error, connection.sdk_exceptions().HttpException):
        return False
    if error.status_code == 409:
        return 'already exists' not in (error.details or '')
    return (error.status_code or 0) >= 500


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
    ironic = client(conn, conf)
    bm = ironic.baremetal
    current = _find_or_create(bm, node, expected=adopt)
    if current is None:
        try:
            if traits:
                bm.set_node_traits(node['id'], traits)
            for port in ports:
                bm.create_port(node_id=node['id'], **port)
            _settle_node(ironic, conf, node, states.IRONIC_ENROLL)
        except Exception:
            _undo_node(conn, conf, node)
            raise
        return True
    if not adopt:
        raise exceptions.ResourceConflict(
            kind='Ironic node', name=node['id'], owner=node['name'],
            reason='Tenks has no record of creating it')
    updates = node_updates(current, node, _driver_defaults(
        ironic, current, node), password_changed)
    port_changes = _port_changes(bm, node['id'], ports)
    _check_state(current, updates, port_changes)
    changed = bool(updates or any(port_changes.values()))
    if 'driver' in updates:
        # The interfaces of the old hardware type may not fit the new one:
        # reset them to its defaults, then set those the node names.
        bm.patch_node(current, [_op('driver', updates.pop(
            'driver'))], reset_interfaces=True)
        updates.update(_interfaces(node, bm.get_node(node['id']), {}))
    if updates:
        bm.patch_node(
            current, [_op(k, v) for k, v in sorted(updates.items())])
    if sorted(current.traits or []) != sorted(traits):
        bm.set_node_traits(node['id'], traits)
        changed = True
    _apply_ports(bm, current, node['id'], port_changes)
    return _settle_node(ironic, conf, node,
                        current.provision_state) or changed


def _find_or_create(bm, node, expected):
    """The node Ironic already has with the node's UUID, or None when
    this call created it. Looked up first when ``expected`` there: a
    create would meet a 409, which openstacksdk tries again for 15 s."""
    if expected:
        try:
            return bm.get_node(node['id'])
        except connection.sdk_exceptions().NotFoundException:
            pass
    return _create(bm, node)


def _create(bm, node):
    """Create the node; None, or the node Ironic already has with its
    UUID (a 409 says so at once: no look before, no retry). CloudError
    when the 409 is for something else (another node has its name)."""
    sdk = connection.sdk_exceptions()
    try:
        bm.create_node(**node)
        return None
    except sdk.ConflictException as e:
        try:
            return bm.get_node(node['id'])
        except sdk.NotFoundException:
            raise exceptions.CloudError(
                service='Ironic', action='create node %s' % node['name'],
                reason=str(e)) from e


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

    with connection.named_errors('Ironic', 'enrol node %s' % name):
        return attempt() or len(attempts) > 1


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


def _driver_defaults(ironic, current, node):
    """The default interfaces of the node's driver, unless it changes
    (changing it resets them)."""
    if current.driver != node['driver']:
        return {}

    def find():
        driver = ironic.baremetal.get_driver(current.driver)
        return {k: getattr(driver, 'default_' + k) for k in INTERFACES
                if getattr(driver, 'default_' + k, None)}
    return ironic.lookup(('driver', current.driver), find)


def _op(field, value):
    if value is None:
        return {'op': 'remove', 'path': '/' + field}
    return {'op': 'add', 'path': '/' + field, 'value': value}


def _port_changes(bm, node_uuid, ports):
    existing = {p.address.lower(): p for p in bm.ports(
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


def _apply_ports(bm, current, node_uuid, changes):
    for port in changes['create']:
        bm.create_port(node_id=node_uuid, **port)
    for port in changes['delete']:
        bm.delete_port(port, ignore_missing=False)
    if not changes['update']:
        return
    window = (current.provision_state not in states.IRONIC_PORT_STATES
              and not current.is_maintenance)
    if window:
        bm.set_node_maintenance(
            node_uuid, reason='Tenks: updating port connectivity')
    try:
        for port, wanted in changes['update']:
            bm.update_port(
                port, physical_network=wanted['physical_network'],
                local_link_connection=wanted['local_link_connection'])
    finally:
        if window:
            bm.unset_node_maintenance(node_uuid)


def _settle_node(ironic, conf, node, state):
    """Manage and provide a node in provision state ``state`` if it is
    enroll or manageable; True if it moved."""
    if state == states.IRONIC_ENROLL:
        _provision(ironic.baremetal, node['id'], 'manage')
        _wait(ironic, node, states.IRONIC_MANAGEABLE, conf.provision_timeout)
        state = states.IRONIC_MANAGEABLE
    if state == states.IRONIC_MANAGEABLE:
        _provision(ironic.baremetal, node['id'], 'provide')
        _wait(ironic, node, states.IRONIC_AVAILABLE, conf.provision_timeout)
        return True
    return False


# The API version that brought manage and provide.
PROVISION_MICROVERSION = '1.4'


def _provision(bm, uuid, action):
    """Ask Ironic to move the node by ``action`` (manage, provide):
    one call, without the GET of the node that openstacksdk's
    set_node_provision_state makes after it."""
    response = bm.put('nodes/%s/states/provision' % uuid,
                      json={'target': action},
                      microversion=PROVISION_MICROVERSION)
    connection.sdk_exceptions().raise_from_response(
        response, error_message='Failed to set provision state for bare '
        'metal node %s to %s' % (uuid, action))


def delete_node(conn, conf, uuid, force=False):
    """Delete the node (and so its ports); False if there is none.

    Ironic refuses (409) while a state change runs on the node, or a
    node it has deployed (active...) outside maintenance: then, once
    the node is at rest, ``force`` (a deploy forced to remove it) puts a
    deployed node in maintenance and it is deleted again; without
    ``force``, Ironic's refusal is the error.
    """
    ironic = client(conn, conf)
    sdk = connection.sdk_exceptions()
    try:
        ironic.baremetal.delete_node(uuid, ignore_missing=False)
        return True
    except sdk.NotFoundException:
        return False
    except sdk.ConflictException as e:
        refused = e
    node = ironic.poller.wait(uuid, conf.provision_timeout)
    if node is None:
        return False
    if deployed(node.provision_state) and not node.is_maintenance:
        if not force:
            raise exceptions.CloudError(
                service='Ironic', action='delete node %s' % uuid,
                reason=str(refused)) from refused
        ironic.baremetal.set_node_maintenance(
            uuid, reason='removed by a forced Tenks deploy')
    try:
        ironic.baremetal.delete_node(uuid, ignore_missing=False)
    except sdk.NotFoundException:
        return False
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
    if bmc['type'] == 'snmp':
        # VirtualPDU answers as an APC Rack PDU.
        return {
            'snmp_driver': 'apc_rackpdu',
            'snmp_address': bmc['address'],
            'snmp_port': bmc['port'],
            'snmp_outlet': bmc['outlet'],
            'snmp_community': spec['snmp_community'],
        }
    return {
        'ipmi_address': bmc['address'],
        'ipmi_port': bmc['port'],
        'ipmi_username': bmc['username'],
        'ipmi_password': spec['ipmi_password'],
    }
