"""Service names from [DEFAULT] host, and the checks a service makes of
its options before it starts."""

import socket
import sys

import pytest

from tenks import conf as tenks_conf
from tenks import daemon
from tenks import rpc


def parse(tmp_path, text):
    path = tmp_path / 'tenks.conf'
    path.write_text(text)
    conf = tenks_conf.new_conf()
    rpc.register_opts(conf)
    conf(['--config-file', str(path)], default_config_files=[])
    return conf


def test_default_host_names_both_services(tmp_path):
    conf = parse(tmp_path, '[DEFAULT]\nhost = hv1\n')
    assert (conf.conductor.host, conf.hostagent.host) == ('hv1', 'hv1')


def test_section_host_overrides_default_host(tmp_path):
    conf = parse(tmp_path, '[DEFAULT]\nhost = hv1\n'
                           '[conductor]\nhost = c1\n')
    assert (conf.conductor.host, conf.hostagent.host) == ('c1', 'hv1')


def test_host_defaults_to_the_hostname(tmp_path):
    conf = parse(tmp_path, '')
    assert conf.host == socket.gethostname()
    assert conf.hostagent.host == socket.gethostname()


GOOD = '''[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:5672/
state_dir = %s
'''


@pytest.mark.parametrize('name', ['conductor', 'hostagent'])
def test_good_configuration_has_no_problem(tmp_path, name):
    conf = parse(tmp_path, GOOD % (tmp_path / 'state'))
    assert daemon.validate(conf, name) == []
    assert (tmp_path / 'state').is_dir()


def test_every_bad_value_is_named_with_its_file(tmp_path):
    conf = parse(tmp_path, GOOD % (tmp_path / 'state') + '''
[hostagent]
resource_prefix = Bad!
heartbeat_interval = often
''')
    heartbeat, prefix = daemon.validate(conf, 'hostagent')
    path = tmp_path / 'tenks.conf'
    assert heartbeat.startswith('[hostagent] heartbeat_interval (in %s): '
                                % path)
    assert 'often' in heartbeat
    assert prefix == ("[hostagent] resource_prefix (in %s): Value 'Bad!' "
                      "doesn't match regex '^[a-z0-9]{0,4}$'" % path)


def test_unknown_driver(tmp_path):
    conf = parse(tmp_path, GOOD % (tmp_path / 'state')
                 + '[hostagent]\nbmc_driver = sushy\n')
    assert daemon.validate(conf, 'hostagent') == [
        "[hostagent] bmc_driver: no driver 'sushy' (known: fake, "
        "virtualbmc)"]
    # Drivers are the hostagent's business only.
    assert daemon.validate(conf, 'conductor') == []


def test_vbmcd_control_port_is_accepted_and_said_to_be_ignored(tmp_path,
                                                               caplog):
    """Issue 19: no TCP control port any more; a configuration that still
    sets one starts, with a warning."""
    conf = parse(tmp_path, GOOD % (tmp_path / 'state')
                 + '[hostagent]\nvbmcd_control_port = 50891\n')
    assert daemon.validate(conf, 'hostagent') == []
    assert ('Option "vbmcd_control_port" from group "hostagent" is '
            'deprecated for removal (Ignored: the IPMI BMCs are controlled '
            'over a Unix socket in state_dir' in caplog.text)


def test_redfish_tls_files_go_together_and_must_be_readable(tmp_path):
    cert = tmp_path / 'c.pem'
    cert.write_text('x')
    conf = parse(tmp_path, GOOD % (tmp_path / 'state')
                 + '[hostagent]\nredfish_tls_certificate = %s\n' % cert)
    assert daemon.validate(conf, 'hostagent') == [
        '[hostagent] redfish_tls_certificate and redfish_tls_key go '
        'together: set both or neither']
    conf = parse(tmp_path, GOOD % (tmp_path / 'state')
                 + '[hostagent]\nredfish_tls_certificate = %s\n'
                   'redfish_tls_key = %s\n' % (cert, tmp_path / 'none'))
    assert daemon.validate(conf, 'hostagent') == [
        '[hostagent] redfish_tls_key: cannot read %s' % (tmp_path / 'none')]


def test_unusable_state_dir(tmp_path):
    (tmp_path / 'file').write_text('')
    conf = parse(tmp_path, GOOD % (tmp_path / 'file' / 'state'))
    [problem] = daemon.validate(conf, 'conductor')
    assert problem.startswith('[DEFAULT] state_dir %s cannot be created'
                              % (tmp_path / 'file' / 'state'))


def test_service_without_a_bus(tmp_path):
    conf = parse(tmp_path, '[DEFAULT]\nstate_dir = %s\n' % tmp_path)
    [problem] = daemon.validate(conf, 'conductor')
    assert problem.startswith('transport_url is not set')


@pytest.mark.parametrize('section', ['DEFAULT', 'conductor', 'hostagent'])
def test_host_with_an_inline_comment_is_refused(tmp_path, section):
    conf = parse(tmp_path, GOOD % (tmp_path / 'state')
                 + '[%s]\nhost = hv1  # the name\n' % section)
    problems = daemon.validate(conf, 'hostagent')
    assert problems == [
        "[%s] host (in %s): Value 'hv1  # the name' doesn't match regex "
        "'^[A-Za-z0-9._-]+$'" % (section, tmp_path / 'tenks.conf')]


def test_ipmi_address_must_be_an_ip_address(tmp_path):
    conf = parse(tmp_path, GOOD % (tmp_path / 'state')
                 + '[hostagent]\nipmi_address = 192.0.2.1  # BMCs\n')
    [problem] = daemon.validate(conf, 'hostagent')
    assert problem.startswith('[hostagent] ipmi_address (in %s): '
                              % (tmp_path / 'tenks.conf'))
    assert 'IP' in problem and '192.0.2.1  # BMCs' in problem


def test_ipmi_address_accepted(tmp_path):
    conf = parse(tmp_path, GOOD % (tmp_path / 'state')
                 + '[hostagent]\nipmi_address = 192.0.2.1\n')
    assert daemon.validate(conf, 'hostagent') == []
    assert conf.hostagent.ipmi_address == '192.0.2.1'


def test_a_service_runs_again_with_malloc_tuned(monkeypatch):
    """glibc reads its malloc tuning only at start: a service without
    one runs itself again with MALLOC_TUNING, same interpreter and
    arguments."""
    from tenks import runtime
    calls = []
    monkeypatch.setattr(runtime.os, 'execve',
                        lambda *args: calls.append(args))
    for name in runtime.MALLOC_TUNING:
        monkeypatch.delenv(name, raising=False)
    runtime.tune_malloc()
    [(path, argv, environ)] = calls
    assert (path, argv) == (sys.executable, sys.orig_argv)
    assert {k: environ[k] for k in runtime.MALLOC_TUNING} == \
        runtime.MALLOC_TUNING


def test_an_operators_malloc_tuning_is_kept(monkeypatch):
    from tenks import runtime
    monkeypatch.setattr(runtime.os, 'execve', pytest.fail)
    monkeypatch.delenv('GLIBC_TUNABLES', raising=False)
    monkeypatch.setenv('MALLOC_ARENA_MAX', '4')
    runtime.tune_malloc()


def test_a_cap_that_is_no_version_is_named_with_its_file(tmp_path):
    conf = parse(tmp_path, GOOD % (tmp_path / 'state')
                 + '[upgrade_levels]\nconductor = dalmatian\n')
    [problem] = daemon.validate(conf, 'hostagent')
    assert problem.startswith('[upgrade_levels] conductor (in %s): Value '
                              "'dalmatian' doesn't match regex"
                              % (tmp_path / 'tenks.conf'))


def test_a_cap_of_another_major_version_stops_the_service(tmp_path):
    """Found as the service makes its clients: it does not start."""
    from conductor import rpcapi
    path = tmp_path / 'tenks.conf'
    path.write_text(GOOD % (tmp_path / 'state')
                    + '[upgrade_levels]\nconductor = 2.1\n')
    with pytest.raises(SystemExit) as raised:
        daemon.run('hostagent', lambda conf, bus: rpcapi.ConductorAPI(bus),
                   argv=['--config-file', str(path)])
    assert str(raised.value) == (
        'tenks-hostagent: Invalid configuration: [upgrade_levels] conductor '
        '= 2.1: the conductor RPC API of this Tenks is %s, and a cap must '
        'have its major version (1.x), not starting' % rpcapi.RPC_API_VERSION)
