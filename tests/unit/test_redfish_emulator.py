"""The Redfish emulator process (hostagent.drivers.bmc.emulator): its
layers on a fake application, then the whole process as the hostagent
starts it, on sushy-tools' fake systems instead of libvirt."""

import concurrent.futures
import http.server
import os
import socket
import subprocess
import sys
import threading
import time

import bcrypt
import pytest
import requests
from werkzeug import test as wz_test

from hostagent.drivers.bmc import allowlist
from hostagent.drivers.bmc import emulator
from hostagent.drivers.bmc import htpasswd
from hostagent.drivers.bmc import sushy

A = 'aaaaaaaa-1111-4111-8111-111111111111'
B = 'bbbbbbbb-2222-4222-8222-222222222222'
AUTH = ('admin', 'pw')


def recorder(calls, status='200 OK', effect=None):
    """A WSGI application that records its requests."""
    def app(env, start_response):
        calls.append((env['REQUEST_METHOD'], env['PATH_INFO']))
        if effect is not None:
            effect()
        start_response(status, [('Content-Type', 'application/json')])
        return [b'{}']
    return app


def write_htpasswd(path, password, rounds=4):
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds))
    tmp = str(path) + '.tmp'
    with open(tmp, 'w') as f:
        f.write('admin:%s\n' % digest.decode())
    os.replace(tmp, path)  # as the hostagent does


def test_a_request_naming_another_system_or_manager_never_gets_through():
    calls = []
    client = wz_test.Client(emulator.Scope(recorder(calls), {A}))
    refused = ['/redfish/v1/Systems/%s' % B,
               '/redfish/v1/Systems/%s/' % B,
               '/redfish//v1/Systems//%s/BIOS' % B,
               '/redfish/v1/Managers/%s' % B,
               '/redfish/v1/Systems/%s/VirtualMedia/Cd/Actions/'
               'VirtualMedia.InsertMedia' % B,
               '/redfish/v1/Managers/%s/VirtualMedia/Cd/Actions/'
               'VirtualMedia.EjectMedia' % B,
               '/redfish/v1/Systems/%s' % A.upper(),  # only as listed
               '/redfish/v1/Systems/node-name',
               '/redfish/v1/Systems/Bios']
    for path in refused:
        for method in ('GET', 'POST', 'PATCH', 'DELETE'):
            answer = client.open(path, method=method)
            assert answer.status_code == 404, (method, path)
            assert answer.json['error']['message'] == (
                'No resource at %s' % path)
    assert calls == []
    served = ['/redfish/v1', '/redfish/v1/Systems', '/redfish/v1/Managers',
              '/redfish/v1/Systems/%s' % A, '/redfish/v1/Managers/%s/' % A,
              '/redfish/v1/Systems/%s/SecureBoot' % A,
              '/redfish/v1/Systems/Bios/BiosRegistry',
              '/redfish/v1/Chassis/x/Thermal']
    for path in served:
        assert client.get(path).status_code == 200, path
    assert [path for _, path in calls] == served


def test_a_password_is_checked_with_bcrypt_once_until_the_file_changes(
        tmp_path, monkeypatch):
    checks = []
    real = htpasswd.matches
    monkeypatch.setattr(htpasswd, 'matches',
                        lambda *a: checks.append(1) or real(*a))
    name = tmp_path / 'htpasswd'
    write_htpasswd(name, 'old')
    calls = []
    client = wz_test.Client(emulator.Authentication(recorder(calls),
                                                    str(name)))
    systems = '/redfish/v1/Systems'
    assert client.get(systems).status_code == 401
    assert client.get('/redfish/v1').status_code == 200  # as sushy-tools
    for _ in range(20):
        assert client.get(systems, auth=('admin', 'old')).status_code == 200
    assert len(checks) == 1
    # Wrong ones are checked every time, and refused.
    for auth in (('admin', 'bad'), ('root', 'old'), ('admin', 'x' * 80)):
        assert client.get(systems, auth=auth).status_code == 401
    # A new password: the old one is refused at once.
    write_htpasswd(name, 'new')
    assert client.get(systems, auth=('admin', 'old')).status_code == 401
    assert client.get(systems, auth=('admin', 'new')).status_code == 200
    assert client.get(systems, auth=('admin', 'new')).status_code == 200
    assert [path for _, path in calls] == (
        ['/redfish/v1'] + [systems] * 22)


def test_sushy_tools_configuring_again_keeps_our_authentication(tmp_path,
                                                                 conf):
    # sushy-emulator's main() configures the application again: it must
    # not add its own authentication (bcrypt on every request) to ours.
    driver = sushy.SushyDriver(conf)
    config = tmp_path / 'emulator.conf'
    config.write_text(driver._config(str(tmp_path), driver._settings(
        str(tmp_path), '127.0.0.1', 9100)))
    write_htpasswd(tmp_path / 'htpasswd', 'pw')
    check = ('import sys\n'
             'from hostagent.drivers.bmc import emulator\n'
             'app = emulator.build(sys.argv[1])\n'
             'app.configure(config_file=sys.argv[1])\n'
             'assert type(app.wsgi_app) is emulator.Authentication\n'
             'assert type(app.wsgi_app.app) is emulator.Scope\n')
    subprocess.run([sys.executable, '-c', check, str(config)], check=True)


def test_the_verifier_keeps_no_password(tmp_path):
    name = tmp_path / 'htpasswd'
    write_htpasswd(name, 'hush-hush')
    verifier = htpasswd.Verifier(str(name))
    assert verifier.check('admin', b'hush-hush')
    assert b'hush-hush' not in repr(vars(verifier)).encode()
    name.unlink()
    assert not verifier.check('admin', b'hush-hush')


def fake_download(directory, name='image.iso'):
    """What sushy-tools leaves of a download: a directory with the
    file."""
    def download():
        os.mkdir(os.path.join(directory, 'tmpdir'))
        with open(os.path.join(directory, 'tmpdir', name), 'wb') as f:
            f.write(b'iso')
    return download


INSERT = '/redfish/v1/Systems/%s/VirtualMedia/Cd/Actions/' \
    'VirtualMedia.InsertMedia' % A
EJECT = INSERT.replace('Insert', 'Eject')


@pytest.mark.parametrize('status', ['500 INTERNAL SERVER ERROR',
                                    '400 BAD REQUEST', None])
def test_a_failed_media_request_leaves_no_download(tmp_path, status):
    directory = tmp_path / 'downloads'
    directory.mkdir()
    (directory / 'earlier').mkdir()
    (directory / 'earlier' / 'kept.iso').write_bytes(b'iso')

    def broken(env, start_response):
        fake_download(str(directory))()
        raise RuntimeError('the view broke')

    app = (recorder([], status, fake_download(str(directory)))
           if status else broken)
    client = wz_test.Client(emulator.Media(app, str(directory)))
    if status:
        assert client.post(INSERT).status_code == int(status.split()[0])
    else:
        with pytest.raises(RuntimeError):
            client.post(INSERT)
    assert sorted(os.listdir(directory)) == ['earlier']
    assert os.listdir(directory / 'earlier') == ['kept.iso']


def test_an_eject_leaves_nothing_of_the_medium(tmp_path):
    directory = tmp_path / 'downloads'
    directory.mkdir()
    calls = []
    client = wz_test.Client(emulator.Media(
        recorder(calls, '204 NO CONTENT', fake_download(str(directory))),
        str(directory)))
    assert client.post(INSERT).status_code == 204
    assert os.listdir(directory / 'tmpdir') == ['image.iso']

    def eject():  # sushy-tools removes the file, not its directory
        os.unlink(directory / 'tmpdir' / 'image.iso')
    client = wz_test.Client(emulator.Media(
        recorder(calls, '204 NO CONTENT', eject), str(directory)))
    assert client.post(EJECT).status_code == 204
    assert os.listdir(directory) == []


def test_media_requests_run_one_at_a_time(tmp_path):
    inside = []
    overlap = []
    gate = threading.Event()

    def slow():
        overlap.append(len(inside))
        inside.append(1)
        gate.wait(0.2)
        inside.pop()

    client_app = emulator.Media(recorder([], '204 NO CONTENT', slow),
                                str(tmp_path))
    threads = [threading.Thread(
        target=lambda: wz_test.Client(client_app).post(INSERT))
        for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlap == [0, 0, 0]


class FakeSystems:
    systems = [A, B]

    def uuid(self, identity):
        return identity

    name = uuid

    def get_power_state(self, identity):
        return 'On'


def test_the_systems_driver_knows_the_allowed_systems_only():
    from sushy_tools import error
    scoped = emulator.ScopedSystems(FakeSystems(), {A})
    assert scoped.systems == [A]
    assert (scoped.uuid(A), scoped.name(A)) == (A, A)
    for call in (scoped.uuid, scoped.name):
        with pytest.raises(error.NotFound):
            call(B)
    assert scoped.get_power_state(A) == 'On'


# The whole emulator on sushy-tools' fake systems A and B, A allowed.

FAKE_SYSTEMS = '''
SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_FAKE_SYSTEMS = [
    {'uuid': %r, 'name': 'a', 'power_state': 'Off', 'nics': []},
    {'uuid': %r, 'name': 'b', 'power_state': 'Off', 'nics': []}]
''' % (A, B)


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class Images(http.server.ThreadingHTTPServer):
    """Serves /image.iso, and /broken.iso cut short; records the
    paths asked."""

    def __init__(self):
        self.asked = []
        images = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                images.asked.append(self.path)
                self.send_response(200)
                self.send_header('Content-Length', '4096')
                self.end_headers()
                self.wfile.write(b'x' * (4096 if self.path == '/image.iso'
                                         else 100))

            def log_message(self, *args):
                pass

        super().__init__(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d' % self.server_address[1]


@pytest.fixture
def images():
    server = Images()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


class Emulator:
    def __init__(self, driver, path, port):
        self.driver = driver
        self.path = path
        self.url = 'http://127.0.0.1:%d/redfish/v1' % port

    def stop(self):
        self.driver._stop(self.path)
        assert self.driver._pid(self.path) is None

    def call(self, method, path, auth=AUTH, **kwargs):
        return requests.request(method, self.url + path, auth=auth,
                                timeout=30, **kwargs)

    def allow(self, *systems):
        for domain, system_id in sushy._all_served(self.path).items():
            sushy._unserve(self.path, domain, system_id)
        for i, system_id in enumerate(systems):
            sushy._serve(self.path, 'n%d' % i, system_id, None)

    def downloads(self):
        found = []
        for root, _, files in os.walk(os.path.join(self.path, 'downloads')):
            found += [os.path.join(root, name) for name in files]
        return found


@pytest.fixture
def fake_emulator(tmp_path, conf, monkeypatch):
    """An emulator started and stopped as the hostagent does."""
    driver = sushy.SushyDriver(conf)
    path = str(tmp_path / 'emulator')
    os.mkdir(path, 0o700)
    real_config = driver._config
    monkeypatch.setattr(driver, '_config',
                        lambda *a: real_config(*a) + FAKE_SYSTEMS)
    port = free_port()
    found = Emulator(driver, path, port)
    found.allow(A)
    write_htpasswd(os.path.join(path, 'htpasswd'), 'pw')
    driver._start(path, driver._settings(path, '127.0.0.1', port))
    try:
        yield found
    finally:
        found.stop()


def members(answer):
    assert answer.status_code == 200, answer.text
    return [m['@odata.id'] for m in answer.json()['Members']]


def test_the_emulator_lists_and_reaches_its_own_systems_only(fake_emulator,
                                                             images):
    # The process ran sushy-tools' main(), which configures its
    # application again: Tenks' layers stay, and its records are the
    # emulator's own.
    em = fake_emulator
    assert em.call('GET', '/Systems', auth=('admin', 'bad')
                   ).status_code == 401
    assert members(em.call('GET', '/Systems')) == ['/redfish/v1/Systems/'
                                                   + A]
    assert 'fakedriver.sqlite' in os.listdir(os.path.join(em.path, 'state'))
    assert members(em.call('GET', '/Managers')) == ['/redfish/v1/Managers/'
                                                    + A]
    [chassis] = members(em.call('GET', '/Chassis'))
    chassis = chassis[len('/redfish/v1'):]
    links = em.call('GET', chassis).json()['Links']
    assert {key: [m['@odata.id'] for m in value]
            for key, value in links.items()} == {
        'ComputerSystems': ['/redfish/v1/Systems/' + A],
        'ManagedBy': ['/redfish/v1/Managers/' + A],
        'ManagersInChassis': ['/redfish/v1/Managers/' + A]}
    thermal = em.call('GET', chassis + '/Thermal').text
    assert A in thermal and B not in thermal
    assert em.call('GET', '/Managers/' + A).status_code == 200
    assert em.call('GET', '/Systems/' + A).status_code == 200

    # B, by path or in a request's body: 404, and nothing done.
    insert = {'Image': images.url + '/image.iso'}
    for method, path, body in [
            ('GET', '/Systems/' + B, None),
            ('GET', '/Systems/b', None),
            ('GET', '/Managers/' + B, None),
            ('GET', '/Managers/b', None),
            ('GET', '/Systems/%s/VirtualMedia/Cd' % B, None),
            ('PATCH', '/Systems/' + B,
             {'Boot': {'BootSourceOverrideTarget': 'Pxe'}}),
            ('PATCH', '/Systems/' + B,
             {'Boot': {'BootSourceOverrideTarget': 'UefiHttp',
                       'HttpBootUri': images.url + '/image.iso'}}),
            ('POST', '/Systems/%s/Actions/ComputerSystem.Reset' % B,
             {'ResetType': 'On'}),
            ('POST', '/Systems/%s/VirtualMedia/Cd/Actions/'
             'VirtualMedia.InsertMedia' % B, insert),
            ('POST', '/Systems/%s/VirtualMedia/Cd/Actions/'
             'VirtualMedia.EjectMedia' % B, {}),
            ('POST', '/UpdateService/Actions/UpdateService.SimpleUpdate',
             {'ImageURI': images.url + '/image.iso',
              'Targets': ['/redfish/v1/Systems/' + B]}),
            ('POST', '/CertificateService/Actions/'
             'CertificateService.ReplaceCertificate',
             {'CertificateString': 'x', 'CertificateType': 'PEM',
              'CertificateUri': '/redfish/v1/Managers/%s/VirtualMedia/Cd/'
              'Certificates/Default' % B})]:
        answer = em.call(method, path, json=body)
        assert answer.status_code == 404, (method, path, answer.text)
    assert images.asked == []
    assert em.downloads() == []
    # Seen through B's own scope: as it was.
    em.allow(A, B)
    system = em.call('GET', '/Systems/' + B).json()
    assert (system['PowerState'], system['Boot']['BootSourceOverrideTarget']
            ) == ('Off', 'Hdd')
    media = em.call('GET', '/Systems/%s/VirtualMedia/Cd' % B).json()
    assert (media['Inserted'], media['Image']) == (False, '')


def test_media_downloads_stay_in_the_emulator_and_go_with_the_media(
        fake_emulator, images):
    em = fake_emulator
    cd = '/Systems/%s/VirtualMedia/Cd' % A
    assert os.stat(os.path.join(em.path, 'downloads')).st_mode & 0o777 == (
        0o700)
    # A download cut short: refused, nothing left.
    answer = em.call('POST', cd + '/Actions/VirtualMedia.InsertMedia',
                     json={'Image': images.url + '/broken.iso'})
    assert answer.status_code >= 400
    assert images.asked == ['/broken.iso']
    assert em.downloads() == []
    assert os.listdir(os.path.join(em.path, 'downloads')) == []

    assert em.call('POST', cd + '/Actions/VirtualMedia.InsertMedia',
                   json={'Image': images.url + '/image.iso'}
                   ).status_code == 204
    [image] = em.downloads()
    assert os.path.basename(image) == 'image.iso'
    assert em.call('GET', cd).json()['Inserted'] is True
    assert em.call('POST', cd + '/Actions/VirtualMedia.EjectMedia',
                   json={}).status_code == 204
    assert os.listdir(os.path.join(em.path, 'downloads')) == []

    # What a stopped emulator downloaded goes with it.
    assert em.call('POST', cd + '/Actions/VirtualMedia.InsertMedia',
                   json={'Image': images.url + '/image.iso'}
                   ).status_code == 204
    assert len(em.downloads()) == 1
    em.stop()
    assert not os.path.exists(os.path.join(em.path, 'downloads'))


def test_the_allow_list_answers_without_reading_files(tmp_path,
                                                      monkeypatch):
    path = tmp_path / 'allowed'
    path.mkdir()
    (path / A).write_text('n0')
    allowed = allowlist.AllowList(str(path))
    reads = []
    real_open = open
    monkeypatch.setattr('builtins.open',
                        lambda *a, **k: reads.append(a) or real_open(*a, **k))
    for _ in range(10):
        assert A in allowed and B not in allowed
    assert reads == []
    monkeypatch.undo()
    (path / A).unlink()
    (path / B).write_text('n1')
    assert B in allowed and A not in allowed


def test_the_same_pair_at_once_is_checked_with_bcrypt_once(tmp_path,
                                                           monkeypatch):
    name = tmp_path / 'htpasswd'
    write_htpasswd(name, 'hush-hush')
    verifier = htpasswd.Verifier(str(name))
    checked = []
    real = htpasswd.matches

    def matches(digest, password):
        checked.append(password)
        time.sleep(0.2)  # the requests below all arrive meanwhile
        return real(digest, password)
    monkeypatch.setattr(htpasswd, 'matches', matches)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        right = list(pool.map(lambda _: verifier.check('admin', b'hush-hush'),
                              range(12)))
        wrong = list(pool.map(lambda _: verifier.check('admin', b'guess'),
                              range(4)))
    assert right == [True] * 12 and wrong == [False] * 4
    # One check for the right pair; a wrong one is never taken on trust.
    assert checked.count(b'hush-hush') == 1
    assert checked.count(b'guess') == 4
