"""Tenks' aggregates mirrored in the real standalone Placement, for
nodes enrolled in the real standalone Ironic: the resource providers of
the nodes (made here as nova-compute makes them) join the Placement
aggregates of their hypervisor's aggregates, keep the aggregates others
set, follow hosts joining and leaving, and leave with the nodes."""

import re
import secrets
import threading
import time
import uuid

import pytest

from tenks import policy
from tenks.cli import client
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df
from tests.functional import openstack_fixtures as of

pytestmark = pytest.mark.functional

# IPMI ports of this file: 9500-9519, by test.
PORTS = {'test_providers_follow_their_hypervisors_aggregates': (9500, 9509),
         'test_a_provider_made_after_the_deploy_joins_at_the_next': (
             9510, 9514),
         'test_placement_refusing_the_mirror_only_warns': (9515, 9519),
         # After the first, on its ports.
         'test_a_running_conductor_puts_providers_back': (9500, 9504)}
VERSION = '1.19'
ADMIN = policy.admin_context()


class Nova:
    """Plays nova-compute's part: a resource provider for each Ironic
    node of ``prefix`` once it is there (UUID and name: the node's),
    with one unit of ``rc`` and ``trait``, in a foreign aggregate of its
    own (as another service would set)."""

    def __init__(self, conn, prefix, rc, trait):
        self.conn = conn
        self.prefix = prefix
        self.rc = rc
        self.trait = trait
        self.foreign = str(uuid.uuid4())
        self.made = []  # providers this made (not a real nova-compute)
        self.provided = set()
        self._stop = threading.Event()
        self._thread = None
        for path in ('/resource_classes/%s' % rc, '/traits/%s' % trait):
            assert self.put(path).status_code in (201, 204)

    def put(self, path, body=None):
        return self.conn.placement.put(path, json=body, microversion=VERSION,
                                       raise_exc=False)

    def get(self, path):
        response = self.conn.placement.get(path, microversion=VERSION)
        response.raise_for_status()
        return response.json()

    def make(self, node_uuid):
        """Make the node's provider, unless a real nova-compute (the
        full Nova of tools/openstack_services.py) made it already; then
        put it into the foreign aggregate."""
        response = self.conn.placement.post('/resource_providers', json={
            'uuid': node_uuid, 'name': node_uuid}, microversion=VERSION,
            raise_exc=False)
        path = '/resource_providers/%s' % node_uuid
        if response.status_code == 201:
            self.made.append(node_uuid)
            for what, body in (
                    ('inventories', {self.rc: {'total': 1}}),
                    ('traits', [self.trait])):
                self.merge('%s/%s' % (path, what), lambda _, b=body: b)
        else:
            assert response.status_code == 409, response.text
        self.merge(path + '/aggregates',
                   lambda have: sorted(set(have) | {self.foreign}))
        self.provided.add(node_uuid)

    def merge(self, path, change):
        """PUT change(what GET ``path`` had) with the generation, again
        while somebody else writes meanwhile (nova-compute does)."""
        key = path.rsplit('/', 1)[1]
        for _ in range(10):
            got = self.get(path)
            response = self.put(path, {
                key: change(got[key]),
                'resource_provider_generation':
                    got['resource_provider_generation']})
            if response.status_code != 409:
                assert response.status_code == 200, response.text
                return
        raise AssertionError('%s kept conflicting' % path)

    def __enter__(self):
        def run():
            try:
                while not self._stop.wait(0.2):
                    for node in self.conn.baremetal.nodes():
                        if (node.name or '').startswith(self.prefix) and (
                                node.id not in self.provided):
                            self.make(node.id)
            except Exception as e:
                self.error = e

        self.error = None
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def aggregates(self, node_uuid):
        """The provider's aggregates; None when it is gone (a real
        nova-compute deletes it after its node)."""
        response = self.conn.placement.get(
            '/resource_providers/%s/aggregates' % node_uuid,
            microversion=VERSION, raise_exc=False)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return set(response.json()['aggregates'])

    def members(self, query):
        return {p['uuid'] for p in self.get(
            '/resource_providers?member_of=%s' % query)['resource_providers']}

    def exists(self, node_uuid):
        response = self.conn.placement.get(
            '/resource_providers/%s' % node_uuid, microversion=VERSION,
            raise_exc=False)
        assert response.status_code in (200, 404), response.text
        return response.status_code == 200

    def clean(self):
        for node_uuid in self.made:
            self.conn.placement.delete('/resource_providers/%s' % node_uuid,
                                       raise_exc=False)
        for path in ('/resource_classes/%s' % self.rc,
                     '/traits/%s' % self.trait):
            self.conn.placement.delete(path, microversion=VERSION,
                                       raise_exc=False)


@pytest.fixture
def env(request, tmp_path, openstack_services, cloud):
    start, end = PORTS[request.node.originalname]
    cluster = cf.ClusterEnv(tmp_path, port_base=start)
    cluster.port_end = end
    # Ironic and Placement only: a Nova API is not needed here.
    for option, service in (('ironic_url', 'baremetal'),
                            ('placement_url', 'placement')):
        cluster.conf.set_override(option, openstack_services[service],
                                  group='openstack')
    token = secrets.token_hex(3).upper()
    nova = Nova(cloud, cluster.node_prefix, 'CUSTOM_PA_%s' % token,
                'CUSTOM_PA_%s' % token)
    cluster.nova = nova
    yield cluster
    nova.clean()
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


def spec(env, count, **top):
    return env.spec(
        count=count,
        specs=[{'type': 'small', 'count': count,
                'node_name_prefix': env.node_prefix,
                'ironic_config': {'resource_class': env.nova.rc[7:],
                                  'traits': [env.nova.trait]}}],
        ipmi_port_range_end=env.port_end, **top)


def admin(env, method, *args):
    """A call of the conductor's API (embedded, as admin), once
    the local hostagent has registered."""
    with client.EmbeddedClient(env.conf) as tenks:
        deadline = time.monotonic() + 30
        while not tenks.list_hypervisors():
            assert time.monotonic() < deadline, 'the hostagent never came'
            time.sleep(0.1)
        if method == 'host':
            return tenks.list_hypervisors()[0]['host']
        return getattr(tenks, method)(*args)


def test_providers_follow_their_hypervisors_aggregates(env, cloud):
    nova = env.nova
    host = admin(env, 'host')
    a = admin(env, 'create_aggregate', env.cluster + '-a', 'az-' + env.cluster)
    b = admin(env, 'create_aggregate', env.cluster + '-b')
    assert admin(env, 'add_aggregate_host', a['name'], host)[
        'warnings'] == []

    # nova-compute makes the providers once the nodes are in Ironic; the
    # deploy waits for them (wait_for_placement), then they join.
    with nova:
        result = env.deploy(spec(env, 2, wait_for_placement=True,
                                 placement_timeout=60))
    assert result['warnings'] == []
    nodes = {n['uuid'] for n in env.nodes()}
    assert len(nodes) == 2 and nova.provided == nodes
    for node in nodes:
        assert nova.aggregates(node) == {nova.foreign, a['uuid']}
    assert nova.members(a['uuid']) == nodes
    assert nova.members(b['uuid']) == set()
    # The zone's nodes: member_of any aggregate of the zone.
    assert nova.members('in:%s,%s' % (a['uuid'], b['uuid'])) == nodes

    # A host joining an aggregate brings its nodes' providers.
    assert admin(env, 'add_aggregate_host', b['name'], host)[
        'warnings'] == []
    for node in nodes:
        assert nova.aggregates(node) == {nova.foreign, a['uuid'], b['uuid']}
    assert nova.members(b['uuid']) == nodes
    # ...and leaving takes them out, leaving the others.
    admin(env, 'update_hypervisor', host, False, 'test')
    assert admin(env, 'remove_aggregate_host', a['name'], host)[
        'warnings'] == []
    admin(env, 'update_hypervisor', host, True)
    for node in nodes:
        assert nova.aggregates(node) == {nova.foreign, b['uuid']}
    assert nova.members(a['uuid']) == set()
    admin(env, 'delete_aggregate', a['name'])

    env.teardown()
    # The providers (nova-compute deletes them later) keep only what
    # others set.
    for node in nodes:
        assert nova.aggregates(node) in ({nova.foreign}, None)
    assert nova.members(b['uuid']) == set()
    assert env.leftovers() == []


def test_a_provider_made_after_the_deploy_joins_at_the_next(env, cloud):
    nova = env.nova
    host = admin(env, 'host')
    a = admin(env, 'create_aggregate', env.cluster + '-a')
    admin(env, 'add_aggregate_host', a['name'], host)
    first = spec(env, 1)
    result = env.deploy(first)
    [node] = env.nodes()
    missing = (
        'Placement has no resource provider yet for node %s (%s; '
        'nova-compute makes it): it is not in its hypervisor\'s '
        'aggregates, and joins them at the conductor\'s next pass, '
        'deploy or aggregate change of its host (wait_for_placement '
        'waits for it)' % (node['name'], node['uuid']))
    if result['warnings']:
        # No wait asked, and no provider yet (Tenks never makes one):
        # the deploy says so. Now nova-compute makes it.
        assert result['warnings'] == [missing]
        nova.make(node['uuid'])
    else:
        # A real nova-compute (tools/openstack_services.py --full-nova)
        # was quicker: the provider joined. As if it made it again:
        nova.merge('/resource_providers/%s/aggregates' % node['uuid'],
                   lambda have: [])
        nova.make(node['uuid'])
    assert nova.aggregates(node['uuid']) == {nova.foreign}
    result = env.deploy(first)
    assert (result['changed'], result['warnings']) == ([], [])
    assert nova.aggregates(node['uuid']) == {nova.foreign, a['uuid']}
    env.teardown()
    assert nova.aggregates(node['uuid']) in ({nova.foreign}, None)
    assert env.leftovers() == []


def test_placement_refusing_the_mirror_only_warns(
        env, cloud, tmp_path, monkeypatch, openstack_services):
    # A cloud without a token: Ironic (noauth) serves it, Placement
    # refuses it. The deploy keeps its nodes and says what it did not do.
    host = admin(env, 'host')
    a = admin(env, 'create_aggregate', env.cluster + '-a')
    admin(env, 'add_aggregate_host', a['name'], host)
    of.use_tokenless_cloud(env, tmp_path, monkeypatch, openstack_services)
    result = env.deploy(spec(env, 1))
    [node] = env.nodes()
    # Placement's noauth2 answers 403 to a request without a token (401
    # to a bad one).
    assert re.fullmatch(
        'Placement answered HTTP 40[13] to GET /resource_providers/%s/'
        'aggregates; the resource provider of node %s \\(%s\\) may not be '
        "in its hypervisor's aggregates: run the deploy again to retry"
        % (node['uuid'], node['name'], node['uuid']), result['warnings'][0])
    assert cloud.baremetal.get_node(node['uuid']).provision_state == (
        'available')
    # Removing the host from the aggregate, then the teardown, only warn.
    admin(env, 'update_hypervisor', host, False, 'test')
    left = admin(env, 'remove_aggregate_host', a['name'], host)
    assert left['hosts'] == [] and 'HTTP 40' in left['warnings'][0]
    result = env.teardown()
    assert re.fullmatch(
        'Placement answered HTTP 40[13] to GET /resource_providers/%s/'
        "aggregates; the resource provider of node %s \\(%s\\) may still "
        "be in Tenks' aggregates" % ((node['uuid'],) * 3),
        result['warnings'][0])
    assert env.leftovers() == []


def test_a_running_conductor_puts_providers_back(env, cloud, tmp_path,
                                                 openstack_services):
    # A provider out of its aggregates (nova-compute made it after the
    # deploy, or made it again) is put back by the conductor's passes,
    # with no deploy.
    nova = env.nova
    d = df.Deployment(tmp_path / 'distributed')
    with open(d.conductor.config, 'a') as f:
        f.write('[openstack]\nironic_url = %s\nplacement_url = %s\n'
                'placement_aggregates_interval = 1\n' % (
                    openstack_services['baremetal'],
                    openstack_services['placement']))
    env.state_dirs += list(d.state_dirs.values())
    with d:
        api = d.api
        a = api.create_aggregate(ADMIN, env.cluster + '-a')
        for host in d.hosts:
            api.add_aggregate_host(ADMIN, a['name'], host)
        operation = d.wait(api.deploy_cluster(ADMIN, spec(env, 1)),
                           timeout=300)
        assert operation['state'] == 'succeeded', operation['error']
        [node] = api.list_nodes(ADMIN, env.cluster)
        if not nova.exists(node['uuid']):
            nova.make(node['uuid'])
        nova.merge('/resource_providers/%s/aggregates' % node['uuid'],
                   lambda have: [nova.foreign])
        deadline = time.monotonic() + 30
        while nova.aggregates(node['uuid']) != {nova.foreign, a['uuid']}:
            assert time.monotonic() < deadline, (
                'the provider is still in %s' % nova.aggregates(
                    node['uuid']))
            time.sleep(0.2)
        operation = d.wait(api.teardown_cluster(ADMIN, env.cluster))
        assert operation['state'] == 'succeeded', operation['error']
        assert nova.aggregates(node['uuid']) in ({nova.foreign}, None)
        # No pass puts it back.
        time.sleep(2)
        assert nova.aggregates(node['uuid']) in ({nova.foreign}, None)
    assert env.leftovers() == []
