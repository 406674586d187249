"""Enrolment and removal of many nodes: Ironic calls per node, state
polled in bulk, bounded concurrency (against a fake Ironic)."""

import collections
import threading
import time
import types
from concurrent import futures

import pytest
from openstack import exceptions as sdk

from flows import registration
from tenks import exceptions
from tenks.cloud import ironic

CONF = types.SimpleNamespace(provision_timeout=5, poll_interval=0.01,
                             ironic_concurrency=4)
# Where each action leads: (state while moving, state it ends in).
ACTIONS = {'manage': ('verifying', 'manageable'),
           'provide': ('cleaning', 'available')}


class FakeBaremetal:
    """Ironic as openstacksdk's baremetal proxy shows it: a node's
    transition ends ``move_seconds`` after its action; it counts the
    calls and how many are in flight at once."""

    def __init__(self, fail_verify=(), move_seconds=0.05):
        self.move_seconds = move_seconds
        self.nodes_by_id = {}
        self.port_list = []
        self.calls = collections.Counter()
        self.fail_verify = set(fail_verify)
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()

    def _call(self, name):
        with self.lock:
            self.calls[name] += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.001)
        with self.lock:
            self.in_flight -= 1

    def _node(self, uuid):
        node = self.nodes_by_id.get(uuid)
        if node is None:
            raise sdk.NotFoundException('Node %s could not be found' % uuid)
        if node.moving and time.monotonic() >= node.moving[0]:
            _, state = node.moving
            node.moving = None
            node.target_provision_state = None
            if uuid in self.fail_verify and state == 'manageable':
                node.provision_state = 'enroll'
                node.last_error = 'Failed to get power state: no BMC'
            else:
                node.provision_state = state
        return node

    def create_node(self, **fields):
        self._call('create_node')
        if fields['id'] in self.nodes_by_id or any(
                n.name == fields['name'] for n in self.nodes_by_id.values()):
            raise sdk.ConflictException('Node exists', http_status=409)
        self.nodes_by_id[fields['id']] = types.SimpleNamespace(
            provision_state='enroll', target_provision_state=None,
            last_error=None, is_maintenance=False, traits=[], moving=None,
            **fields)

    def get_node(self, uuid):
        self._call('get_node')
        return self._node(uuid)

    def nodes(self, fields=None, **query):
        self._call('nodes')
        for uuid in list(self.nodes_by_id):
            yield types.SimpleNamespace(**vars(self._node(uuid)))

    def get_driver(self, name):
        self._call('get_driver')
        return types.SimpleNamespace(name=name)

    def patch_node(self, node, ops):
        self._call('patch_node')
        for op in ops:
            setattr(self._node(node.id), op['path'].lstrip('/'),
                    op.get('value'))

    def ports(self, node_id, details=False):
        self._call('ports')
        return [types.SimpleNamespace(**p) for p in self.port_list
                if p['node_id'] == node_id]

    def set_node_traits(self, uuid, traits):
        self._call('set_node_traits')
        self._node(uuid).traits = traits

    def create_port(self, node_id, **port):
        self._call('create_port')
        self._node(node_id)
        self.port_list.append(dict(port, node_id=node_id))

    def put(self, path, json, microversion):
        """PUT nodes/<uuid>/states/provision only."""
        self._call('PUT provision')
        _, uuid, _, _ = path.split('/')
        assert microversion == '1.4'
        self._move(uuid, json['target'])
        return types.SimpleNamespace(status_code=202, headers={})

    def set_node_provision_state(self, uuid, action):
        self._call('set_node_provision_state')
        self._move(uuid, action)

    def _move(self, uuid, action):
        node = self._node(uuid)
        moving, state = ACTIONS[action]
        node.provision_state, node.target_provision_state = moving, state
        node.moving = (time.monotonic() + self.move_seconds, state)

    def set_node_maintenance(self, uuid, reason=None):
        self._call('set_node_maintenance')
        self._node(uuid).is_maintenance = True

    def delete_node(self, uuid, ignore_missing=True):
        self._call('delete_node')
        node = self._node(uuid)
        if node.target_provision_state or (
                node.provision_state == 'active' and not node.is_maintenance):
            raise sdk.ConflictException('Node %s is locked' % uuid,
                                        http_status=409)
        del self.nodes_by_id[uuid]
        self.port_list = [p for p in self.port_list if p['node_id'] != uuid]


class FakeConnection:

    def __init__(self, baremetal):
        self.baremetal = baremetal
        self.image = None


def node(index):
    return {'id': '00000000-0000-0000-0000-%012d' % index,
            'name': 'tk%d' % index, 'driver': 'redfish',
            'driver_info': {'redfish_address': 'http://127.0.0.1:8000'}}


def port(index):
    return {'address': '52:54:00:00:%02x:%02x' % divmod(index, 256),
            'physical_network': 'physnet1', 'local_link_connection': {}}


def in_parallel(function, items, workers=16):
    with futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(function, items))


def test_many_nodes_reach_available_with_five_calls_each_and_bulk_polls():
    fake = FakeBaremetal()
    conn = FakeConnection(fake)
    count = 60
    started = time.monotonic()
    results = in_parallel(lambda i: ironic.ensure_node(
        conn, CONF, node(i), ['CUSTOM_GOLD'], [port(i)], adopt=False),
        range(count))
    elapsed = time.monotonic() - started
    assert results == [True] * count
    assert {n.provision_state for n in fake.nodes_by_id.values()} == {
        'available'}
    assert len(fake.port_list) == count
    # create, traits, port, manage, provide; nobody looks at one node.
    per_node = {name: n / count for name, n in fake.calls.items()
                if name != 'nodes'}
    assert per_node == {'create_node': 1, 'set_node_traits': 1,
                        'create_port': 1, 'PUT provision': 2}
    # The waits of all nodes share the lists: one an interval at most.
    assert 0 < fake.calls['nodes'] <= elapsed / CONF.poll_interval + 1
    assert ironic.client(conn, CONF).poller.polls == fake.calls['nodes']


def test_calls_in_flight_never_exceed_the_configured_concurrency():
    fake = FakeBaremetal()
    conn = FakeConnection(fake)
    in_parallel(lambda i: ironic.ensure_node(
        conn, CONF, node(i), [], [port(i)], adopt=False), range(40),
        workers=32)
    # The bound, and the one list of the nodes in transition beside it.
    assert CONF.ironic_concurrency <= fake.most_in_flight <= (
        CONF.ironic_concurrency + 1)
    assert 'set_node_traits' not in fake.calls  # no traits, no call


def test_a_node_already_there_is_learnt_from_the_409_and_refused():
    fake = FakeBaremetal()
    conn = FakeConnection(fake)
    fake.create_node(**node(0))
    fake.calls.clear()
    with pytest.raises(exceptions.ResourceConflict):
        ironic.ensure_node(conn, CONF, node(0), [], [], adopt=False)
    # Not ours: left as it is.
    assert list(fake.nodes_by_id) == [node(0)['id']]
    assert fake.calls == {'create_node': 1, 'get_node': 1}


@pytest.mark.parametrize('made', [True, False])
def test_a_create_whose_connection_dropped_is_tried_again_and_adopted(made):
    """A POST is not sent again under a dropped connection (see
    connection.resend_when_dropped): Ironic may or may not have made the
    node; the next attempt adopts it, and leaves one node."""
    from keystoneauth1 import exceptions as ksa_exceptions
    fake = FakeBaremetal()
    create = fake.create_node
    dropped = [ksa_exceptions.ConnectFailure(
        "('Connection aborted.', ConnectionResetError(104))")]

    def create_node(**fields):
        if dropped and made:
            create(**fields)
        if dropped:
            raise dropped.pop()
        return create(**fields)
    fake.create_node = create_node
    conn = FakeConnection(fake)
    assert ironic.enrol(conn, CONF, 'tk0', node(0), ['CUSTOM_GOLD'],
                        [port(0)], adopt=False) is True
    [made_node] = fake.nodes_by_id.values()
    assert (made_node.provision_state, made_node.traits) == (
        'available', ['CUSTOM_GOLD'])
    assert [p['address'] for p in fake.port_list] == [port(0)['address']]


def test_a_recorded_node_is_looked_up_not_created_again():
    """A create would meet a 409 that openstacksdk tries again for 15 s;
    a recorded node gone from Ironic is made again."""
    fake = FakeBaremetal()
    conn = FakeConnection(fake)
    ironic.ensure_node(conn, CONF, node(0), [], [port(0)], adopt=False)
    fake.calls.clear()
    assert ironic.ensure_node(conn, CONF, node(0), ['CUSTOM_GOLD'],
                              [port(0)], adopt=True) is True
    assert 'create_node' not in fake.calls
    assert fake.nodes_by_id[node(0)['id']].traits == ['CUSTOM_GOLD']
    del fake.nodes_by_id[node(0)['id']]
    assert ironic.ensure_node(conn, CONF, node(0), [], [port(0)],
                              adopt=True) is True
    assert fake.calls['create_node'] == 1
    assert fake.nodes_by_id[node(0)['id']].provision_state == 'available'


def test_a_taken_name_is_an_error_at_once_not_tried_again():
    fake = FakeBaremetal()
    conn = FakeConnection(fake)
    fake.create_node(**dict(node(1), name='tk0'))
    fake.calls.clear()
    with pytest.raises(exceptions.CloudError) as raised:
        ironic.enrol(conn, CONF, 'tk0', node(0), [], [], adopt=False)
    assert str(raised.value).startswith(
        'Ironic refused to create node tk0: Node exists')
    assert fake.calls == {'create_node': 1, 'get_node': 1}


def test_a_node_that_fails_verification_is_named_and_deleted():
    fake = FakeBaremetal(fail_verify=[node(1)['id']])
    conn = FakeConnection(fake)

    def enrol(i):
        try:
            return ironic.ensure_node(conn, CONF, node(i), [], [port(i)],
                                      adopt=False)
        except exceptions.CloudError as e:
            return str(e)
    results = in_parallel(enrol, range(3))
    assert results == [True, 'Ironic refused to move node tk1 to '
                       'manageable: Failed to get power state: no BMC', True]
    # What this call created is gone again, ports and all.
    assert sorted(fake.nodes_by_id) == [node(0)['id'], node(2)['id']]
    assert {p['node_id'] for p in fake.port_list} == {node(0)['id'],
                                                  node(2)['id']}


def test_a_wait_that_began_after_a_list_began_is_not_answered_by_it():
    """A list taken before the action could show the node still at rest
    in its old state."""
    fake = FakeBaremetal()
    fake.create_node(**node(0))
    listed = threading.Event()
    release = threading.Event()
    real_nodes = fake.nodes

    def slow_nodes(**query):
        found = list(real_nodes(**query))
        listed.set()
        release.wait(5)
        return found
    fake.nodes = slow_nodes
    poller = ironic.StatePoller(fake, 0.01)
    first = []
    waiting = threading.Thread(target=lambda: first.append(
        poller.wait(node(0)['id'], 5)))
    waiting.start()
    assert listed.wait(5)
    # The first list holds the node in enroll; this wait began later.
    late = []
    waiting_late = threading.Thread(target=lambda: late.append(
        poller.wait(node(0)['id'], 5)))
    waiting_late.start()
    fake.set_node_provision_state(node(0)['id'], 'manage')
    release.set()
    waiting.join()
    waiting_late.join()
    assert first[0].provision_state == 'enroll'
    assert late[0].provision_state == 'manageable'
    assert poller.polls >= 2


def test_a_node_still_moving_at_the_timeout_is_named_and_deleted():
    fake = FakeBaremetal(move_seconds=60)
    conn = FakeConnection(fake)
    with pytest.raises(exceptions.CloudError) as raised:
        ironic.ensure_node(conn, types.SimpleNamespace(
            provision_timeout=1, poll_interval=0.01, ironic_concurrency=4),
            node(0), [], [], adopt=False)
    assert str(raised.value) == (
        'Ironic refused to move node tk0 to manageable: still verifying '
        'after 1 s')


def test_removal_is_one_call_a_node_at_rest():
    fake = FakeBaremetal()
    conn = FakeConnection(fake)
    for i in range(20):
        fake.create_node(**node(i))
    fake.calls.clear()
    assert in_parallel(lambda i: ironic.delete_node(
        conn, CONF, node(i)['id']), range(20)) == [True] * 20
    assert fake.nodes_by_id == {}
    assert fake.calls == {'delete_node': 20}
    # Gone already: nothing to do.
    assert not ironic.delete_node(conn, CONF, node(0)['id'])


def test_a_node_in_transition_is_deleted_once_at_rest():
    fake = FakeBaremetal()
    conn = FakeConnection(fake)
    fake.create_node(**node(0))
    fake.set_node_provision_state(node(0)['id'], 'manage')
    fake.calls.clear()
    assert ironic.delete_node(conn, CONF, node(0)['id'])
    assert fake.nodes_by_id == {}
    assert fake.calls['delete_node'] == 2
    assert 'get_node' not in fake.calls


def test_a_deployed_node_is_removed_only_when_forced():
    fake = FakeBaremetal()
    conn = FakeConnection(fake)
    fake.create_node(**node(0))
    fake.nodes_by_id[node(0)['id']].provision_state = 'active'
    with pytest.raises(exceptions.CloudError) as raised:
        ironic.delete_node(conn, CONF, node(0)['id'])
    assert 'Node %s is locked' % node(0)['id'] in str(raised.value)
    assert fake.nodes_by_id[node(0)['id']].is_maintenance is False
    assert ironic.delete_node(conn, CONF, node(0)['id'], force=True)
    assert fake.nodes_by_id == {}


def test_a_deploy_image_name_is_looked_up_once_for_all_nodes():
    lookups = []

    def find_image(name, ignore_missing):
        lookups.append(name)
        return types.SimpleNamespace(id='image-uuid')
    conn = FakeConnection(FakeBaremetal())
    conn.image = types.SimpleNamespace(find_image=find_image)
    assert in_parallel(lambda i: ironic.resolve_image(
        conn, CONF, 'ipa-kernel'), range(10)) == ['image-uuid'] * 10
    assert lookups == ['ipa-kernel']


class FakeDb:

    def __init__(self):
        self.deleted = []

    def delete_resources(self, host, things):
        self.deleted += things

    def list_aggregates(self):
        return []


def test_a_removal_ironic_fails_for_a_moment_is_tried_again():
    fake = FakeBaremetal()
    fake.create_node(**node(0))
    unavailable = [sdk.HttpException('Service Unavailable', http_status=503)]
    delete = fake.delete_node

    def delete_node(uuid, ignore_missing=True):
        if unavailable:
            raise unavailable.pop()
        return delete(uuid, ignore_missing)
    fake.delete_node = delete_node
    svc = types.SimpleNamespace(db=FakeDb(), cloud=types.SimpleNamespace(
        connection=FakeConnection(fake), conf=CONF))
    assert registration.remove_node(svc, node(0)['id']) == {
        'changed': True, 'warnings': []}
    assert fake.nodes_by_id == {}
    assert svc.db.deleted == [('ironic_node', node(0)['id'])]


def test_a_slow_list_spaces_the_next_ones():
    """A busy Ironic is not listed more than half the time."""
    fake = FakeBaremetal(move_seconds=1)
    fake.create_node(**node(0))
    fake.set_node_provision_state(node(0)['id'], 'manage')
    real_nodes = fake.nodes

    def slow_nodes(**query):
        time.sleep(0.1)
        return real_nodes(**query)
    fake.nodes = slow_nodes
    poller = ironic.StatePoller(fake, 0.01)
    assert poller.wait(node(0)['id'], 5).provision_state == 'manageable'
    # 1 s at 0.1 s a list: every 0.2 s (5 lists), not every 0.11 s (9).
    assert 4 <= poller.polls <= 6


def test_the_state_list_does_not_queue_behind_the_bounded_calls():
    fake = FakeBaremetal()
    conn = FakeConnection(fake)
    ironic_client = ironic.client(conn, types.SimpleNamespace(
        poll_interval=0.01, ironic_concurrency=1))
    fake.create_node(**node(0))
    fake.set_node_provision_state(node(0)['id'], 'manage')
    release = threading.Event()
    fake.get_node = lambda uuid: release.wait(5)
    # Another node's call holds the only slot.
    holder = threading.Thread(
        target=ironic_client.baremetal.get_node, args=('other',))
    holder.start()
    try:
        found = ironic_client.poller.wait(node(0)['id'], 1)
        assert (found.provision_state, found.target_provision_state) == (
            'manageable', None)
    finally:
        release.set()
        holder.join()
