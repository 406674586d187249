"""Which cloud Tenks enrols in: [openstack] cloud, then the standalone
endpoints, then what the openstack CLI would use (OS_CLOUD, the openrc
variables, the only cloud of clouds.yaml)."""

import http.server
import json
import os
import socket
import struct
import threading
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


class DroppingServer:
    """An HTTP server on loopback that answers the first request of each
    connection and keeps it open, then closes it (a reset) under the
    next one without answering: a server that closes an idle kept-alive
    connection just as a request is sent on it. ``seen``: (method,
    answered) of each request it read."""

    def __init__(self):
        self.sock = socket.create_server(('127.0.0.1', 0))
        self.url = 'http://127.0.0.1:%d' % self.sock.getsockname()[1]
        self.seen = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,),
                             daemon=True).start()

    @staticmethod
    def _request(stream):
        head = stream.readline()
        if not head:
            return None
        length = 0
        while (line := stream.readline()) not in (b'\r\n', b''):
            name, _, value = line.decode().partition(':')
            if name.lower() == 'content-length':
                length = int(value)
        stream.read(length)
        return head.split()[0].decode()

    def _connection(self, conn):
        with conn, conn.makefile('rb') as stream:
            method = self._request(stream)
            self.seen.append((method, True))
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: '
                         b'application/json\r\nContent-Length: 2\r\n'
                         b'\r\n{}')
            method = self._request(stream)
            if method is not None:
                self.seen.append((method, False))
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                struct.pack('ii', 1, 0))

    def close(self):
        self.sock.close()


@pytest.fixture
def dropping(environ):
    server = DroppingServer()
    yield server
    server.close()


def dropping_cloud(environ, server, how):
    """A Cloud on ``server``. Keep it while its session is used: a
    Connection that is collected closes its session's kept-alive
    connections (openstacksdk's finalizer)."""
    if how == 'standalone':
        return make_cloud(ironic_url=server.url)
    path = os.environ['OS_CLIENT_CONFIG_FILE']
    with open(path, 'w') as f:
        yaml.safe_dump({'clouds': {'dropping': {
            'auth_type': 'none',
            'baremetal_endpoint_override': server.url}}}, f)
    return make_cloud(cloud='dropping')


@pytest.mark.parametrize('how', ['standalone', 'clouds.yaml'])
def test_a_get_is_sent_again_when_the_connection_drops_under_it(
        environ, dropping, how):
    cloud = dropping_cloud(environ, dropping, how)
    session = cloud.connection.session
    for _ in range(2):
        assert session.get(dropping.url + '/v1/nodes').json() == {}
    assert dropping.seen == [('GET', True), ('GET', False), ('GET', True)]


@pytest.mark.parametrize('how', ['standalone', 'clouds.yaml'])
def test_a_post_is_not_sent_again_its_caller_decides(environ, dropping,
                                                      how):
    from keystoneauth1 import exceptions as ksa_exceptions
    cloud = dropping_cloud(environ, dropping, how)
    session = cloud.connection.session
    # Read: the connection goes back to the pool, for the POST.
    assert session.get(dropping.url + '/v1/nodes').json() == {}
    with pytest.raises(ksa_exceptions.ConnectFailure,
                       match='Connection aborted'):
        session.post(dropping.url + '/v1/nodes', json={'name': 'tk0'})
    assert dropping.seen == [('GET', True), ('POST', False)]


def test_a_refused_connection_is_not_tried_again(environ, caplog):
    """Only keystoneauth's connect_retries would: an unreachable
    service is reported at once."""
    from keystoneauth1 import exceptions as ksa_exceptions
    with socket.create_server(('127.0.0.1', 0)) as sock:
        url = 'http://127.0.0.1:%d' % sock.getsockname()[1]
    session = make_cloud(ironic_url=url).connection.session
    with caplog.at_level('DEBUG', logger='urllib3'):
        with pytest.raises(ksa_exceptions.ConnectFailure, match='refused'):
            session.get(url + '/v1/nodes')
    # urllib3 logs each request it sends again.
    assert not [r for r in caplog.records if 'Retrying' in r.getMessage()]


def test_an_ironic_that_stays_unreachable_is_named_as_such(environ,
                                                          monkeypatch):
    """Not "refused": Ironic never answered (a port nothing listens on,
    through openstacksdk and keystoneauth as they are)."""
    import tenacity
    monkeypatch.setattr(ironic, 'retrying', tenacity.retry(
        retry=tenacity.retry_if_exception(ironic._transient), reraise=True,
        stop=tenacity.stop_after_attempt(2)))
    with socket.create_server(('127.0.0.1', 0)) as sock:
        url = 'http://127.0.0.1:%d' % sock.getsockname()[1]
    cloud = make_cloud(ironic_url=url)
    node = {'id': '00000000-0000-0000-0000-000000000000', 'name': 'tk0',
            'driver': 'redfish'}
    with pytest.raises(exceptions.CloudUnreachable) as raised:
        ironic.enrol(cloud.connection, cloud.conf, 'tk0', node, [], [],
                     adopt=False)
    # openstacksdk's first request looks for Ironic's version document.
    assert str(raised.value).startswith(
        'Could not reach Ironic to enrol node tk0: Unable to find a version '
        'discovery document at %s' % url)
    assert isinstance(raised.value, exceptions.CloudError)


class ScriptedIronic(http.server.ThreadingHTTPServer):
    """An Ironic API on loopback that answers each POST or PUT with the
    next status of ``statuses`` (then 202), and its version documents
    to openstacksdk's discovery. ``seen``: (method, path, status)."""

    def __init__(self, statuses):
        super().__init__(('127.0.0.1', 0), ScriptedHandler)
        self.url = 'http://127.0.0.1:%d' % self.server_address[1]
        self.statuses = list(statuses)
        self.seen = []
        threading.Thread(target=self.serve_forever, daemon=True).start()


class ScriptedHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    FAULTS = {409: 'tk0 already exists.',
              503: 'No free conductor workers available'}

    def _answer(self, status, body=None):
        data = json.dumps(body).encode() if body is not None else b''
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        version = {'id': 'v1', 'status': 'CURRENT', 'version': '1.81',
                   'min_version': '1.1', 'links': [
                       {'href': self.server.url + '/v1/', 'rel': 'self'}]}
        self._answer(200, {'versions': [version],
                           'default_version': version})

    def _act(self):
        self.rfile.read(int(self.headers['Content-Length'] or 0))
        status = (self.server.statuses.pop(0) if self.server.statuses
                  else 202)
        self.server.seen.append((self.command, self.path, status))
        if status in self.FAULTS:
            self._answer(status, {'error_message': json.dumps(
                {'faultstring': self.FAULTS[status]})})
        else:
            self._answer(status)

    do_POST = do_PUT = _act

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted(environ):
    servers = []

    def start(*statuses):
        servers.append(ScriptedIronic(statuses))
        cloud = make_cloud(ironic_url=servers[-1].url)
        return servers[-1], ironic.client(cloud.connection, cloud.conf)
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_create_refused_with_409_is_not_sent_again(scripted):
    """A taken name, UUID or MAC stays taken: the error comes at once,
    not after openstacksdk's 15.5 s of retries; a 503 is still retried,
    and so is a 409 of anything else (a node locked by a state
    change)."""
    node = {'id': '00000000-0000-0000-0000-000000000000', 'name': 'tk0',
            'driver': 'redfish'}
    server, client = scripted(409)
    with pytest.raises(sdk.ConflictException, match='already exists'):
        client.baremetal.create_node(**node)
    assert server.seen == [('POST', '/v1/nodes', 409)]

    server, client = scripted(409)
    with pytest.raises(sdk.ConflictException, match='already exists'):
        client.baremetal.create_port(node_id=node['id'],
                                     address='52:54:00:00:00:01')
    assert server.seen == [('POST', '/v1/ports', 409)]

    server, client = scripted(503, 201)
    client.baremetal.create_node(**node)
    assert server.seen == [('POST', '/v1/nodes', 503),
                           ('POST', '/v1/nodes', 201)]

    server, client = scripted(409)
    ironic._provision(client.baremetal, node['id'], 'manage')
    path = '/v1/nodes/%s/states/provision' % node['id']
    assert server.seen == [('PUT', path, 409), ('PUT', path, 202)]


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
