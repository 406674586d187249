"""console_log_enabled, per node type, through a real deploy: libvirt,
virtualbmc and ipmitool, embedded conductor and hostagent."""

import os
import time
from xml.etree import ElementTree as ET

import libvirt
import pytest

from tenks import spec as tenks_spec
from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional

PORT_BASE = 7830  # 7830-7839


@pytest.fixture
def env(tmp_path):
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=PORT_BASE)) as cluster:
        yield cluster


def wait_for(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_console_log_follows_the_node_type(env):
    spec = env.spec(count=1)
    spec['node_types']['quiet'] = dict(spec['node_types']['small'],
                                       console_log_enabled=False)
    spec['specs'].append({'type': 'quiet', 'count': 1,
                          'node_name_prefix': env.node_prefix + 'q',
                          'vol_name_prefix': 'vol'})
    env.deploy(tenks_spec.validate(spec))
    logged, quiet = env.node_name(0), env.node_prefix + 'q0'
    ports = {n['name']: n['bmc_port'] for n in env.nodes()}
    log_dir = os.path.join(env.state_dir, 'logs', 'console')
    conn = libvirt.open(cf.URI)
    try:
        for name in (logged, quiet):
            result = cf.ipmitool(ports[name], 'power', 'on')
            assert result.returncode == 0, result.stderr
        for name in (logged, quiet):
            dom = conn.lookupByName(name)
            assert wait_for(lambda d=dom: d.state()[0]
                            == libvirt.VIR_DOMAIN_RUNNING)
        logs = {name: ET.fromstring(conn.lookupByName(name).XMLDesc())
                .find('devices/serial/log') for name in (logged, quiet)}
        assert logs[quiet] is None
        assert logs[logged].get('file') == os.path.join(
            log_dir, '%s-console.log' % logged)
        assert wait_for(lambda: os.path.exists(logs[logged].get('file')))
        assert sorted(os.listdir(log_dir)) == ['%s-console.log' % logged]
        for name in (logged, quiet):
            assert cf.ipmitool(ports[name], 'power', 'off').returncode == 0
    finally:
        conn.close()
    env.teardown()
    assert os.listdir(log_dir) == []
