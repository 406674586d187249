"""Which cloud Tenks enrols in: [openstack] cloud, then the standalone
endpoints, then what the openstack CLI would use (OS_CLOUD, the openrc
variables, the only cloud of clouds.yaml)."""

import os
import types

import pytest
import yaml
from openstack import exceptions as sdk

from tenks import conf as tenks_conf
from tenks import exceptions
from tenks.cloud import connection
from tenks.cloud import ironic
from tenks.cloud import nova

IRONIC = 'http://192.0.2.1:6385'


@pytest.fixture
def environ(monkeypatch, tmp_path):
    """An environment without OS_* variables or clouds.yaml of its own."""
    for key in list(os.environ):
        if key.startswith('OS_'):
            monkeypatch.delenv(key)
    monkeypatch.setenv('HOME', str(tmp_path))
    monkeypatch.setenv('XDG_CONFIG_HOME', str(tmp_path / 'config'))
    path = tmp_path / 'clouds.yaml'
    path.write_text(yaml.safe_dump({'clouds': {
        name: {'auth_type': 'none',
               'baremetal_endpoint_override': 'http://%s:6385' % name}
        for name in ('first', 'second')}}))
    monkeypatch.setenv('OS_CLIENT_CONFIG_FILE', str(path))
    return monkeypatch


def make_cloud(**openstack):
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    for option, value in openstack.items():
        conf.set_override(option, value, group='openstack')
    return connection.Cloud(conf)


def test_os_cloud_chooses_from_clouds_yaml(environ):
    environ.setenv('OS_CLOUD', 'second')
    assert make_cloud().endpoint('baremetal') == 'http://second:6385'


def test_configured_cloud_wins_over_os_cloud(environ):
    environ.setenv('OS_CLOUD', 'second')
    assert make_cloud(cloud='first').endpoint('baremetal') == (
        'http://first:6385')


def test_standalone_endpoints_win_over_os_cloud(environ):
    environ.setenv('OS_CLOUD', 'second')
    assert make_cloud(ironic_url=IRONIC).endpoint('baremetal') == IRONIC


def test_openrc_variables(environ):
    environ.delenv('OS_CLIENT_CONFIG_FILE')
    environ.setenv('OS_AUTH_TYPE', 'none')
    environ.setenv('OS_BAREMETAL_ENDPOINT_OVERRIDE', IRONIC)
    assert make_cloud().endpoint('baremetal') == IRONIC


def test_several_clouds_and_no_choice_is_no_cloud(environ):
    with pytest.raises(exceptions.CloudUnavailable,
                       match=r'\(none configured\): set OS_CLOUD'):
        make_cloud().check(['baremetal'])


def test_unknown_cloud_is_named(environ):
    environ.setenv('OS_CLOUD', 'third')
    with pytest.raises(exceptions.ConfigError,
                       match='cloud third of clouds.yaml: Cloud third was '
                             'not found'):
        make_cloud().check(['baremetal'])


def test_cloud_without_the_service_says_so(environ):
    environ.setenv('OS_CLOUD', 'first')
    with pytest.raises(exceptions.CloudUnavailable,
                       match='cloud first of clouds.yaml has no compute '
                             'endpoint'):
        make_cloud().check(['compute'])


@pytest.fixture
def password_cloud(environ, tmp_path):
    """A cloud of clouds.yaml whose password is left to OS_PASSWORD."""
    path = tmp_path / 'clouds.yaml'
    path.write_text(yaml.safe_dump({'clouds': {'mycloud': {
        'auth_type': 'password',
        'auth': {'auth_url': 'http://127.0.0.1:9/', 'username': 'admin',
                 'project_name': 'admin', 'user_domain_name': 'Default',
                 'project_domain_name': 'Default'}}}}))
    environ.setenv('OS_PASSWORD', 's3cret')
    return environ


def test_os_password_completes_os_cloud(password_cloud):
    password_cloud.setenv('OS_CLOUD', 'mycloud')
    auth = make_cloud().connection.config.config['auth']
    assert auth['password'] == 's3cret'
    assert auth['username'] == 'admin'


def test_os_password_completes_configured_cloud(password_cloud):
    auth = make_cloud(cloud='mycloud').connection.config.config['auth']
    assert auth['password'] == 's3cret'


def test_unreachable_keystone_is_named(password_cloud):
    password_cloud.setenv('OS_CLOUD', 'mycloud')
    with pytest.raises(exceptions.CloudUnavailable,
                       match=r'Cannot reach Keystone at '
                             r'http://127\.0\.0\.1:9/: .*cloud mycloud'):
        make_cloud().check(['baremetal'])


class FakeConnection:
    """Just the calls deployed_nodes and server_name make."""

    def __init__(self, nodes, servers, compute=True):
        self.baremetal = types.SimpleNamespace(
            nodes=lambda fields: [types.SimpleNamespace(
                id=uuid, provision_state=state, instance_id=instance)
                for uuid, state, instance in nodes])

        def get_server(server_id):
            if server_id not in servers:
                raise sdk.NotFoundException('no server %s' % server_id)
            return types.SimpleNamespace(name=servers[server_id])

        self.compute = types.SimpleNamespace(get_server=get_server)
        self.compute_endpoint = 'http://nova' if compute else None

    def endpoint_for(self, service):
        return self.compute_endpoint


def test_deployed_nodes_are_those_of_ours_outside_the_free_states():
    conn = FakeConnection([('n1', 'active', 's1'), ('n2', 'available', None),
                           ('n3', 'deploy failed', None),
                           ('other', 'active', 's9')], {})
    assert ironic.deployed_nodes(conn, ['n1', 'n2', 'n3', 'gone'],
                                {'available'}) == {
        'n1': ('active', 's1'), 'n3': ('deploy failed', None)}
    assert ironic.deployed_nodes(conn, [], {'available'}) == {}


def test_server_name_is_none_when_nova_cannot_say():
    conn = FakeConnection([], {'s1': 'web-1'})
    assert nova.server_name(conn, 's1') == 'web-1'
    assert nova.server_name(conn, 's2') is None
    conn.compute_endpoint = None
    assert nova.server_name(conn, 's1') is None


def test_a_driver_ironic_does_not_enable_is_refused_up_front(
        environ, monkeypatch):
    """One list of Ironic's drivers; each missing one named with the
    node types that ask for it, and what Ironic has."""
    from conductor import deployments
    from tests.unit.conftest import make_spec
    cloud = make_cloud(ironic_url=IRONIC)
    listed = []

    def drivers():
        listed.append(True)
        return [types.SimpleNamespace(name=n) for n in ('ipmi', 'redfish')]
    monkeypatch.setattr(cloud, '_connection', types.SimpleNamespace(
        baremetal=types.SimpleNamespace(drivers=drivers),
        endpoint_for=lambda service: IRONIC), raising=False)
    rc = {'resource_class': 'baremetal'}
    spec = make_spec(
        node_types={
            'plain': {'memory_mb': 128, 'vcpus': 1,
                      'physical_networks': ['physnet1']},
            'pdu': {'memory_mb': 128, 'vcpus': 1, 'ironic_driver': 'snmp',
                    'physical_networks': ['physnet1']}},
        specs=[{'type': 'plain', 'count': 1, 'ironic_config': rc},
               {'type': 'pdu', 'count': 1, 'ironic_config': rc},
               {'type': 'pdu', 'count': 1}])
    assert deployments.enrolled_drivers(spec) == {
        'ipmi': ['specs[0], node type plain'],
        'snmp': ['specs[1], node type pdu']}
    with pytest.raises(exceptions.IronicDriverMissing) as raised:
        cloud.check_ironic_drivers(deployments.enrolled_drivers(spec))
    assert str(raised.value).startswith(
        'Ironic at %s does not enable the hardware type(s) this spec enrols '
        'nodes with: snmp (specs[1], node type pdu) (it enables: ipmi, '
        'redfish)' % IRONIC)
    assert len(listed) == 1
    cloud.check_ironic_drivers({'redfish': ['specs[0], node type plain']})
    cloud.check_ironic_drivers({})
    assert len(listed) == 2
