"""Real Ironic, Placement and Nova API for functional tests; a full Nova
and Glance for the tests that ask for them.

The services are those of ``tools/openstack_services.py``: their own venv
(``.venv-openstack``, installed on first use, about a minute), state in
``.openstack-state`` or ``$TENKS_OPENSTACK_STATE``, ports 6385, 8778 and
8774 unless overridden. The session fixture starts whichever are not
running and stops at the end only those it started. ``full_nova`` (a
module's fixture) adds the Nova conductor, scheduler and nova-compute,
Glance and a Neutron stand-in answering empty lists (``.venv-glance``,
about 40 s on first use; about 0.8 GiB more memory), and stops them
after the module: their nova-compute reports every Ironic node to
Placement, which other tests do not expect.
"""

import importlib.util
import os
import time

import openstack
import pytest
from keystoneauth1 import noauth
from keystoneauth1 import session

from tenks.cloud import connection as tenks_connection

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'tools', 'openstack_services.py')
_spec = importlib.util.spec_from_file_location('openstack_services', _PATH)
services = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(services)

# Placement's noauth2 makes "admin" an admin token; Nova, without its
# authtoken filter, builds the request context from the other three.
HEADERS = {'X-Auth-Token': 'admin', 'X-User-Id': 'tenks-test',
           'X-Project-Id': 'tenks-test', 'X-Roles': 'admin'}
POLL = 0.2  # s; openstacksdk's own waits poll every 2 s

TIMINGS = {}
# Where Ironic deletes a node outside maintenance.
DELETABLE = ('enroll', 'manageable', 'available', 'adopt failed')


@pytest.fixture(scope='session')
def openstack_services():
    """Ensure the services run; returns their endpoints."""
    started_at = time.monotonic()
    started = services.start()
    TIMINGS['start'] = time.monotonic() - started_at
    TIMINGS['started'] = started
    yield services.endpoints()
    if started:
        services.stop(names=started)


@pytest.fixture(scope='module')
def full_nova(openstack_services):
    """Ensure the full Nova and Glance run; returns the endpoints."""
    started_at = time.monotonic()
    started = services.start(full=True)
    TIMINGS['full nova start'] = time.monotonic() - started_at
    yield services.endpoints()
    # The Nova API (restarted when its cells changed) stays: the session
    # fixture stops it if it started it.
    services.stop(names=[n for n in started if n in services.FULL_NOVA])


@pytest.fixture
def cloud(openstack_services):
    """An openstacksdk Connection to the standalone services."""
    return connection()


def use_services(cluster, endpoints):
    """Point ``cluster``'s conductor at the standalone services."""
    for service, option in (('baremetal', 'ironic_url'),
                            ('compute', 'nova_url'),
                            ('placement', 'placement_url')):
        cluster.conf.set_override(option, endpoints[service],
                                  group='openstack')


def use_tokenless_cloud(cluster, tmp_path, monkeypatch, endpoints):
    """Point ``cluster``'s conductor at a cloud without a token: Ironic
    (noauth) serves it, Placement refuses it."""
    clouds = tmp_path / 'clouds.yaml'
    clouds.write_text(
        'clouds:\n  tokenless:\n    auth_type: none\n'
        '    baremetal_endpoint_override: %s\n'
        '    placement_endpoint_override: %s\n' % (
            endpoints['baremetal'], endpoints['placement']))
    monkeypatch.setenv('OS_CLIENT_CONFIG_FILE', str(clouds))
    cluster.conf.set_override('cloud', 'tokenless', group='openstack')


def cleaned_up(cluster, cloud, more=()):
    """After a test: what it left on the machine and in Ironic (and the
    leftovers ``more`` lists), removed and returned."""
    left = cluster.leftovers() + list(more)
    try:
        left += remove_ironic_nodes(cloud, cluster.node_prefix)
    finally:
        cluster.force_clean()
    return left


def connection():
    """An openstacksdk Connection to Ironic, Placement, Nova and Glance
    (when it runs)."""
    endpoints = services.endpoints()
    sess = session.Session(auth=noauth.NoAuth(), additional_headers=HEADERS)
    # As Tenks' own: gunicorn closes idle connections after 2 s.
    conn = openstack.connection.Connection(
        session=sess,
        baremetal_endpoint_override=endpoints['baremetal'],
        placement_endpoint_override=endpoints['placement'],
        compute_endpoint_override=endpoints['compute'],
        image_endpoint_override=endpoints['image'])
    return tenks_connection.resend_when_dropped(conn)


def wait_for_node(conn, node_id, timeout=60):
    """The node once its provision and power actions are over."""
    deadline = time.monotonic() + timeout
    while True:
        node = conn.baremetal.get_node(node_id)
        if (node.target_provision_state is None
                and node.target_power_state is None):
            return node
        if time.monotonic() > deadline:
            raise TimeoutError('node %s still %s -> %s, power %s -> %s '
                               'after %d s'
                               % (node_id, node.provision_state,
                                  node.target_provision_state,
                                  node.power_state, node.target_power_state,
                                  timeout))
        time.sleep(POLL)


def remove_ironic_nodes(conn, prefix):
    """Delete the Ironic nodes whose names start with ``prefix``, once
    their actions are over (in maintenance where Ironic would refuse:
    an active node); return what was there, for a leftover check."""
    left = []
    steps = []
    for node in conn.baremetal.nodes():
        if node.name and node.name.startswith(prefix):
            left.append('ironic node %s' % node.name)
            steps.append(lambda node=node: _remove_ironic_node(conn, node))
    each(*steps)
    return left


def _remove_ironic_node(conn, node):
    node = wait_for_node(conn, node.id)
    if node.provision_state not in DELETABLE:
        conn.baremetal.set_node_maintenance(node.id, 'test cleanup')
    conn.baremetal.delete_node(node.id)
    return []


def remove_providers(conn, uuids):
    """Delete the Placement resource providers ``uuids`` (the nodes'
    own, which nova-compute deletes only some time after their Ironic
    nodes are gone); return those that were there."""
    return each(*[lambda uuid=uuid: _remove_provider(conn, uuid)
                  for uuid in sorted(uuids)])


def _remove_provider(conn, uuid):
    gone = conn.placement.delete('/resource_providers/%s' % uuid,
                                 raise_exc=False)
    assert gone.status_code in (204, 404), (
        'resource provider %s: HTTP %d %s' % (uuid, gone.status_code,
                                              gone.text))
    return ['resource provider %s' % uuid] if gone.status_code == 204 else []


def each(*steps):
    """Run every cleanup step (a callable returning a list of what it
    found), even after one fails; return their lists joined, or raise
    what failed once all have run."""
    found, errors = [], []
    for step in steps:
        try:
            found += step()
        except Exception as e:
            errors.append(e)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ExceptionGroup('%d cleanup steps failed' % len(errors), errors)
    return found


def adopt(conn, node_id, timeout=60, **instance_info):
    """Make an available or manageable node ``active`` without a
    deployment: Ironic's adopt (manageable -> adopting -> active) takes
    over a machine said to run a workload already. ``instance_info``:
    what the node's boot interface needs for it, if anything."""
    node = conn.baremetal.get_node(node_id)
    if node.provision_state == 'available':
        conn.baremetal.set_node_provision_state(node_id, 'manage')
        wait_for_node(conn, node_id, timeout)
    if instance_info:
        conn.baremetal.patch_node(node_id, [{
            'op': 'add', 'path': '/instance_info', 'value': instance_info}])
    conn.baremetal.set_node_provision_state(node_id, 'adopt')
    node = wait_for_node(conn, node_id, timeout)
    if node.provision_state != 'active':
        raise RuntimeError('adopting node %s ended in %s: %s' % (
            node_id, node.provision_state, node.last_error))
    return node
