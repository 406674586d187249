"""The Placement mirror of Tenks' aggregates: providers of enrolled
nodes join their hypervisor's aggregates, foreign aggregates stay,
concurrent writers are merged with, and Placement's refusals become
warnings."""

import re
import time
import uuid

import pytest

from flows import registration
from tenks.cli import embedded
from tenks.cloud import ironic
from tenks.cloud import placement_aggregates as pa
from tests.unit.conftest import make_spec

FOREIGN = str(uuid.uuid4())


class Response:

    def __init__(self, status, body=None):
        self.status_code = status
        self.body = body
        self.text = str(body)

    def json(self):
        return self.body


class Placement:
    """Resource providers' aggregates with Placement's generation rule;
    ``refuse``: a status every request gets; ``meddle``: called before
    each PUT is applied, as a concurrent writer."""

    def __init__(self):
        self.providers = {}
        self.calls = []
        self.refuse = None
        self.meddle = None

    def add(self, uuid, aggregates=()):
        self.providers[uuid] = {'aggregates': set(aggregates),
                                'generation': 0}

    def aggregates(self, uuid):
        return self.providers[uuid]['aggregates']

    def get(self, path, microversion=None, raise_exc=True):
        self.calls.append(('GET', path))
        if self.refuse:
            return Response(self.refuse, {'errors': []})
        member_of = re.fullmatch(r'/resource_providers\?member_of=(.+)',
                                 path)
        if member_of:
            return Response(200, {'resource_providers': [
                {'uuid': u} for u, p in sorted(self.providers.items())
                if member_of.group(1) in p['aggregates']]})
        rp = self.providers.get(path.split('/')[2])
        if rp is None:
            return Response(404, {'errors': []})
        return Response(200, {'aggregates': sorted(rp['aggregates']),
                              'resource_provider_generation':
                                  rp['generation']})

    def put(self, path, json=None, microversion=None, raise_exc=True):
        self.calls.append(('PUT', path))
        assert microversion == '1.19'
        if self.refuse:
            return Response(self.refuse, {'errors': []})
        uuid = path.split('/')[2]
        if self.meddle:
            self.meddle(uuid)
        rp = self.providers.get(uuid)
        if rp is None:
            return Response(404, {'errors': []})
        if json['resource_provider_generation'] != rp['generation']:
            return Response(409, {'errors': []})
        rp['aggregates'] = set(json['aggregates'])
        rp['generation'] += 1
        return Response(200, {})


class Conn:

    def __init__(self, placement, endpoint='http://placement'):
        self.placement = placement
        self.endpoint = endpoint

    def endpoint_for(self, service):
        return self.endpoint


@pytest.fixture
def conductor(conf, hypervisor):
    """The conductor of conftest, whose hostagent registers at once."""
    conf.set_override('heartbeat_interval', 1, group='hostagent')
    with embedded.embedded(conf) as conductor:
        yield conductor


@pytest.fixture
def cloud(conductor, monkeypatch):
    """The conductor's cloud, with a fake Placement."""
    placement = Placement()
    monkeypatch.setattr(conductor.cloud, '_connection', Conn(placement))
    return placement


@pytest.fixture
def nodes(conductor, cloud):
    """Two nodes on hv1, recorded as enrolled in Ironic, each with a
    provider (as nova-compute makes them) in a foreign aggregate."""
    # The embedded hostagent registers as it starts.
    while not conductor.registry.list_hypervisors():
        time.sleep(0.01)
    conductor.deployments.deploy(make_spec(count=2))
    uuids = [n.uuid for n in conductor.db.list_nodes()]
    assert {n.hypervisor for n in conductor.db.list_nodes()} == {'hv1'}
    conductor.registry.register_agent('hv2', {'host': 'hv2', 'cpus': 4,
                                              'memory_mb': 4096})
    conductor.db.begin_resources('unit', 'openstack', 'op', [
        ('ironic_node', u, {'uuid': u}) for u in uuids])
    for u in uuids:
        cloud.add(u, [FOREIGN])
    return uuids


def test_add_and_remove_host_keep_placement_in_step(conductor, cloud,
                                                    nodes):
    a1 = conductor.aggregates.create('a1', 'az1')
    a2 = conductor.aggregates.create('a2')
    other = str(uuid.uuid4())
    cloud.add(other, [FOREIGN])  # not a node of Tenks
    assert conductor.aggregates.add_host('a1', 'hv1')['warnings'] == []
    conductor.aggregates.add_host('a2', 'hv1')
    for u in nodes:
        assert cloud.aggregates(u) == {FOREIGN, a1['uuid'], a2['uuid']}
    # A host without nodes: nothing to ask Placement.
    cloud.calls.clear()
    conductor.aggregates.add_host('a2', 'hv2')
    assert cloud.calls == []

    conductor.registry.update_hypervisor('hv1', False, 'moving')
    assert conductor.aggregates.remove_host('a1', 'hv1')['warnings'] == []
    for u in nodes:
        assert cloud.aggregates(u) == {FOREIGN, a2['uuid']}
    # Somebody else's provider in a Tenks aggregate is not Tenks' to
    # change.
    cloud.aggregates(other).add(a2['uuid'])
    conductor.aggregates.remove_host('a2', 'hv1')
    conductor.registry.update_hypervisor('hv2', False, 'moving')
    conductor.aggregates.remove_host('a2', 'hv2')
    for u in nodes:
        assert cloud.aggregates(u) == {FOREIGN}
    assert conductor.aggregates.delete('a2') == {'warnings': []}
    assert cloud.aggregates(other) == {FOREIGN, a2['uuid']}


def test_a_deleted_aggregate_leaves_the_providers_it_was_left_on(
        conductor, cloud, nodes):
    a1 = conductor.aggregates.create('a1')
    conductor.aggregates.add_host('a1', 'hv1')
    conductor.registry.update_hypervisor('hv1', False)
    cloud.refuse = 503
    # Placement failed: the host left the aggregate, its providers not.
    left = conductor.aggregates.remove_host('a1', 'hv1')
    assert left['hosts'] == []
    assert left['warnings'] == [
        'Placement answered HTTP 503 to GET /resource_providers/%s/'
        'aggregates; the resource provider of node tk%d (%s) may not be in '
        "its hypervisor's aggregates: run the deploy again to retry"
        % (u, i, u) for i, u in enumerate(nodes)]
    cloud.refuse = None
    cloud.calls.clear()
    assert conductor.aggregates.delete('a1') == {'warnings': []}
    assert cloud.calls[0] == ('GET', '/resource_providers?member_of=%s'
                              % a1['uuid'])
    for u in nodes:
        assert cloud.aggregates(u) == {FOREIGN}


def test_placement_refusals_are_warnings_and_the_change_stands(
        conductor, cloud, nodes):
    conductor.aggregates.create('a1')
    cloud.refuse = 403
    added = conductor.aggregates.add_host('a1', 'hv1')
    assert added['hosts'] == ['hv1']
    assert len(added['warnings']) == 2
    assert added['warnings'][0].startswith(
        'Placement answered HTTP 403 to GET /resource_providers/%s/'
        'aggregates; the resource provider of node tk0' % nodes[0])
    assert conductor.aggregates.get('a1')['hosts'] == ['hv1']


def test_a_concurrent_writer_is_merged_with(conductor, cloud, nodes):
    a1 = conductor.aggregates.create('a1')
    theirs = str(uuid.uuid4())

    def meddle(rp):
        # Another service adds an aggregate between read and write, once.
        if theirs not in cloud.aggregates(rp):
            cloud.aggregates(rp).add(theirs)
            cloud.providers[rp]['generation'] += 1

    cloud.meddle = meddle
    assert conductor.aggregates.add_host('a1', 'hv1')['warnings'] == []
    for u in nodes:
        assert cloud.aggregates(u) == {FOREIGN, theirs, a1['uuid']}


def test_a_writer_that_always_wins_ends_in_a_warning(conductor, cloud,
                                                     nodes):
    conductor.aggregates.create('a1')

    def meddle(rp):
        cloud.providers[rp]['generation'] += 1

    cloud.meddle = meddle
    warnings = conductor.aggregates.add_host('a1', 'hv1')['warnings']
    assert warnings[0].startswith(
        'Placement kept answering HTTP 409 (a concurrent change) to PUT '
        '/resource_providers/%s/aggregates after 5 attempts' % nodes[0])


def test_join_after_a_deploy(conductor, cloud, nodes):
    names = {u: 'tk%d' % i for i, u in enumerate(nodes)}
    # No aggregate: Placement is not asked.
    assert pa.join(conductor.db, conductor.cloud.connection, names) == []
    assert cloud.calls == []
    a1 = conductor.aggregates.create('a1')
    conductor.db.add_aggregate_host(a1['id'], 'hv1')  # no mirror yet
    del cloud.providers[nodes[1]]  # nova-compute has not made it yet
    assert pa.join(conductor.db, conductor.cloud.connection, names) == [
        'Placement has no resource provider yet for node tk1 (%s; '
        'nova-compute makes it): it is not in its hypervisor\'s '
        'aggregates, and joins them at the conductor\'s next pass, '
        'deploy or aggregate change of its host (wait_for_placement '
        'waits for it)' % nodes[1]]
    assert cloud.aggregates(nodes[0]) == {FOREIGN, a1['uuid']}
    # With a wait, a provider that appears meanwhile joins too.
    polls = []

    def appear(path, **kwargs):
        polls.append(path)
        if len(polls) == 3:
            cloud.add(nodes[1])
        return Placement.get(cloud, path, **kwargs)

    cloud.get = appear
    assert pa.join(conductor.db, conductor.cloud.connection, names,
                   wait=5, interval=0.01) == []
    assert cloud.aggregates(nodes[1]) == {a1['uuid']}
    # Without a Placement endpoint there is nothing to do.
    conductor.cloud.connection.endpoint = None
    cloud.calls.clear()
    assert pa.join(conductor.db, conductor.cloud.connection, names) == []
    assert cloud.calls == []


def test_a_deploy_that_changes_nothing_joins_new_providers(
        conductor, cloud, nodes):
    a1 = conductor.aggregates.create('a1')
    conductor.db.add_aggregate_host(a1['id'], 'hv1')  # no mirror yet
    result = conductor.deployments.deploy(make_spec(count=2))
    assert (result['changed'], result['warnings']) == ([], [])
    for u in nodes:
        assert cloud.aggregates(u) == {FOREIGN, a1['uuid']}


def test_a_removed_node_leaves_tenks_aggregates_only(conductor, cloud,
                                                      nodes, monkeypatch):
    a1 = conductor.aggregates.create('a1')
    conductor.aggregates.add_host('a1', 'hv1')
    monkeypatch.setattr(ironic, 'delete_node',
                        lambda conn, conf, uuid, force: True)
    svc = type('Svc', (), {'db': conductor.db, 'cloud': conductor.cloud})
    assert cloud.aggregates(nodes[0]) == {FOREIGN, a1['uuid']}
    assert registration.remove_node(svc, nodes[0]) == {
        'changed': True, 'warnings': []}
    assert cloud.aggregates(nodes[0]) == {FOREIGN}
    cloud.refuse = 401
    assert registration.remove_node(svc, nodes[1])['warnings'] == [
        'Placement answered HTTP 401 to GET /resource_providers/%s/'
        'aggregates; the resource provider of node %s (%s) may still be '
        "in Tenks' aggregates" % (nodes[1], nodes[1], nodes[1])]


def test_a_pass_changes_only_the_providers_out_of_step(conductor, cloud,
                                                       nodes):
    a1 = conductor.aggregates.create('a1')
    a2 = conductor.aggregates.create('a2')
    conductor.aggregates.add_host('a1', 'hv1')
    cloud.calls.clear()
    # All in step: one member_of query per aggregate, nothing else.
    assert conductor.aggregates.mirror_all() == []
    assert sorted(cloud.calls) == sorted(
        ('GET', '/resource_providers?member_of=%s' % a['uuid'])
        for a in (a1, a2))
    # nova-compute made a provider again (or a change failed): only it
    # is read and written.
    cloud.aggregates(nodes[1]).clear()
    cloud.aggregates(nodes[0]).add(a2['uuid'])
    cloud.calls.clear()
    assert conductor.aggregates.mirror_all() == []
    assert [c for c in cloud.calls if 'member_of' not in c[1]] == [
        ('GET', '/resource_providers/%s/aggregates' % nodes[0]),
        ('PUT', '/resource_providers/%s/aggregates' % nodes[0]),
        ('GET', '/resource_providers/%s/aggregates' % nodes[1]),
        ('PUT', '/resource_providers/%s/aggregates' % nodes[1])]
    assert cloud.aggregates(nodes[0]) == {FOREIGN, a1['uuid']}
    assert cloud.aggregates(nodes[1]) == {a1['uuid']}
    # A provider not made yet is no warning.
    del cloud.providers[nodes[1]]
    assert conductor.aggregates.mirror_all() == []
    cloud.refuse = 403
    assert conductor.aggregates.mirror_all() == [
        'Placement answered HTTP 403 to GET /resource_providers?member_of=%s;'
        " did not check the aggregates of the nodes' resource providers"
        % a1['uuid']]


def test_passes_run_until_the_mirror_stops(conductor, cloud, nodes):
    a1 = conductor.aggregates.create('a1')
    conductor.aggregates.add_host('a1', 'hv1')
    cloud.aggregates(nodes[0]).clear()
    conductor.aggregates.start_mirror(0.05)
    try:
        deadline = time.monotonic() + 10
        while cloud.aggregates(nodes[0]) != {a1['uuid']}:
            assert time.monotonic() < deadline, 'no pass brought it back'
            time.sleep(0.05)
    finally:
        conductor.aggregates.stop_mirror()
    cloud.aggregates(nodes[0]).clear()
    time.sleep(0.2)
    assert cloud.aggregates(nodes[0]) == set()


def test_a_node_without_its_ironic_record_leaves(conductor, cloud, nodes):
    # Its removal deleted the Ironic node and its record: a pass that
    # read the node list before must not put its provider back.
    a1 = conductor.aggregates.create('a1')
    conductor.aggregates.add_host('a1', 'hv1')
    conductor.db.delete_resource('openstack', 'ironic_node', nodes[0])
    outcome = pa.sync(conductor.db, conductor.cloud.connection,
                      {u: 'hv1' for u in nodes})
    assert outcome.changed == [nodes[0]]
    assert cloud.aggregates(nodes[0]) == {FOREIGN}
    assert cloud.aggregates(nodes[1]) == {FOREIGN, a1['uuid']}
