"""Services as in Nova and Ironic: ``[DEFAULT] host`` names a conductor
and a hostagent on the bus, and a service with a bad option refuses to
start, saying which, instead of failing later over and over."""

import contextlib
import os
import socket
import subprocess
import time

import pytest
import yaml

from conductor import rpcapi
from tenks import conf as tenks_conf
from tenks import policy
from tenks import rpc
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df

pytestmark = pytest.mark.functional

# This helper's IPMI ports: 8400-8499.
PORT_BASE = 8420

ADMIN = policy.admin_context()


@contextlib.contextmanager
def vhost(name):
    df.rabbitmqctl('add_vhost', name)
    try:
        df.rabbitmqctl('set_permissions', '-p', name, 'guest', '.*', '.*',
                       '.*')
        yield 'rabbit://guest:guest@127.0.0.1:5672/%s' % name
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            df.rabbitmqctl('delete_vhost', name)


def service(kind, tmp_path, text):
    config = tmp_path / ('%s.conf' % kind)
    config.write_text(text)
    return df.Service(kind, str(config), str(tmp_path / ('%s.log' % kind)))


def test_default_host_names_conductor_and_hostagent(tmp_path):
    env = cf.ClusterEnv(tmp_path, port_base=PORT_BASE,
                        state_dirs=[str(tmp_path / 'agent')])
    token = env.cluster.split('-')[1]
    conductor_name = 'c-%s' % token
    agent_name = 'hv-%s' % token
    with cf.checked(env), vhost('tenks-names-%s' % token) as url:
        conductor = service('conductor', tmp_path, '''
[DEFAULT]
transport_url = %s
state_dir = %s
host = %s
''' % (url, tmp_path / 'conductor', conductor_name))
        agent = service('hostagent', tmp_path, '''
[DEFAULT]
transport_url = %s
state_dir = %s
host = %s

[hostagent]
heartbeat_interval = 1
''' % (url, tmp_path / 'agent', agent_name))
        conf = tenks_conf.new_conf()
        conf([], default_config_files=[])
        bus = rpc.Bus(conf, url=url)
        try:
            conductor.start()
            agent.start()
            # The conductor answers a call addressed to it by name...
            named = rpcapi.ConductorAPI(bus, timeout=2).client.prepare(
                server=conductor_name)
            hosts = wait_for(lambda: {
                h['host'] for h in named.call(policy.to_dict(ADMIN),
                                              'list_hypervisors')
                if h['state'] == 'up'}, str(tmp_path))
            # ...and the hostagent registered under its own.
            assert hosts == {agent_name}
            assert socket.gethostname() not in hosts

            # A deploy reaches the agent by its name, and its results
            # reach the conductor by its name.
            spec = tmp_path / 'cluster.yaml'
            spec.write_text(yaml.safe_dump(env.spec(count=1)))
            done = subprocess.run(
                [cf.TENKS, 'deploy', str(spec)], capture_output=True,
                text=True, timeout=180,
                env=dict(os.environ, TENKS_TRANSPORT_URL=url))
            assert done.returncode == 0, done.stderr
            nodes = rpcapi.ConductorAPI(bus, timeout=30).list_nodes(
                ADMIN, cluster=env.cluster)
            assert [n['hypervisor'] for n in nodes] == [agent_name]
            gone = subprocess.run(
                [cf.TENKS, 'teardown', env.cluster], capture_output=True,
                text=True, timeout=180,
                env=dict(os.environ, TENKS_TRANSPORT_URL=url))
            assert gone.returncode == 0, gone.stderr
        finally:
            agent.stop()
            conductor.stop()
            bus.cleanup()


def test_hostagent_started_before_its_conductor_registers_at_once(
        tmp_path):
    """Its first registration found no conductor; the conductor asks it
    when it starts, rather than letting it wait for its heartbeat."""
    token = cf.ClusterEnv(tmp_path, port_base=PORT_BASE).cluster.split(
        '-')[1]
    with vhost('tenks-order-%s' % token) as url:
        agent = service('hostagent', tmp_path, '''
[DEFAULT]
transport_url = %s
state_dir = %s
host = early-%s

[hostagent]
heartbeat_interval = 600
''' % (url, tmp_path / 'agent', token))
        conductor = service('conductor', tmp_path, '''
[DEFAULT]
transport_url = %s
state_dir = %s
host = c-%s
''' % (url, tmp_path / 'conductor', token))
        conf = tenks_conf.new_conf()
        conf([], default_config_files=[])
        bus = rpc.Bus(conf, url=url)
        try:
            agent.start()
            # Its first registration has gone out, to nobody.
            time.sleep(2)
            conductor.start()
            api = rpcapi.ConductorAPI(bus, timeout=2)
            hosts = wait_for(lambda: {
                h['host'] for h in api.list_hypervisors(ADMIN)
                if h['state'] == 'up'}, str(tmp_path), timeout=20)
            assert hosts == {'early-%s' % token}
        finally:
            conductor.stop()
            agent.stop()
            bus.cleanup()


def wait_for(poll, logs, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = poll()
        except Exception:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError('no hostagent came up; logs in %s' % logs)
        time.sleep(0.2)


def start_with(kind, tmp_path, text):
    """Run tenks-<kind> with this config; its exit code and output."""
    config = tmp_path / ('%s.conf' % kind)
    config.write_text(text)
    process = subprocess.Popen(
        [os.path.join(cf.BIN, 'tenks-' + kind), '--config-file',
         str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError('tenks-%s did not refuse to start: %s'
                             % (kind, output)) from None
    return process.returncode, output


@pytest.mark.parametrize('kind,section,expected', [
    ('hostagent', '[hostagent]\nresource_prefix = Bad!\n',
     "[hostagent] resource_prefix"),
    ('hostagent', '[hostagent]\nvirt_driver = vmware\n',
     "[hostagent] virt_driver: no driver 'vmware' (known: fake, libvirt)"),
    ('conductor', '[conductor]\nagent_timeout = 0\n',
     '[conductor] agent_timeout'),
    ('conductor', '[DEFAULT]\nstate_dir = {file}/state\n',
     '[DEFAULT] state_dir {file}/state cannot be created'),
])
def test_service_refuses_bad_options(tmp_path, kind, section, expected):
    a_file = tmp_path / 'a-file'
    a_file.write_text('')
    code, output = start_with(kind, tmp_path, '''
[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:5672/tenks-never-%s
state_dir = %s
host = refuse-%s
''' % (kind, tmp_path / 'state', kind) + section.format(file=a_file))
    assert code == 1
    assert 'invalid configuration, not starting' in output
    assert expected.format(file=a_file) in output
