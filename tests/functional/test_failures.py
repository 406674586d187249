"""Failure paths on the real components: a deploy never removes what
another deployment made, a rollback that cannot finish keeps what a
re-run or a teardown needs, and no operation stays running."""

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid

import libvirt
import pytest
from pyroute2 import IPRoute

from conductor import planner
from tenks import exceptions
from tenks import names
from tenks.cli import embedded
from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional

# This module's IPMI ports: 7900-7959.
PORT_BASE = 7900


@pytest.fixture
def env(tmp_path):
    other = str(tmp_path / 'other' / 'state')
    cluster = cf.ClusterEnv(tmp_path, port_base=PORT_BASE,
                            state_dirs=[other])
    with cf.checked(cluster):
        yield cluster


def inventory(env, bmc_ports):
    """Everything of ``env``'s cluster on the machine, volumes and the
    BMCs' answers included."""
    found = env.leftovers()
    conn = libvirt.open(cf.URI)
    try:
        found += ['domain %s uuid %s' % (d.name(), d.UUIDString())
                  for d in conn.listAllDomains() if d.name() in found]
        for pool in conn.listAllStoragePools():
            if 'pool %s' % pool.name() in found:
                found += ['volume %s' % v.name()
                          for v in pool.listAllVolumes()]
    finally:
        conn.close()
    for port in bmc_ports:
        status = cf.ipmitool(port, 'power', 'status')
        found.append('BMC %d: %s' % (port, status.stdout.strip()))
    return sorted(found)


def test_second_state_dir_never_removes_what_the_first_deployed(env,
                                                                tmp_path):
    """The same spec deployed from a second state directory fails on
    the first one's things, and its rollback leaves all of them."""
    external = env.bridge_prefix + 'x'
    with IPRoute() as ipr:
        ipr.link('add', ifname=external, kind='bridge')
    try:
        spec = env.spec(count=2, physnet_mappings={'physnet1': external})
        env.deploy(spec)
        ports = [n['bmc_port'] for n in env.nodes()]
        before = inventory(env, ports)
        kinds = {entry.split()[0] for entry in before}
        assert {'domain', 'pool', 'volume', 'link', 'BMC'} <= kinds
        bridge = env.bridge_prefix + '0'
        links = [bridge, *names.uplink_veths(bridge),
                 *[names.tap(env.node_name(i), 0) for i in range(2)]]
        assert {'link %s' % link for link in links} <= set(before)

        other = cf.ClusterEnv(tmp_path / 'other', port_base=PORT_BASE)
        with pytest.raises(exceptions.TenksError) as raised:
            other.deploy(spec)
        assert inventory(env, ports) == before
        # Refused as the first deployment's, not as a mere clash.
        assert 'tenks:%s:' % env.cluster in str(raised.value)

        env.teardown()
        assert env.leftovers() == ['link %s' % external]
        assert env.nodes() == []
    finally:
        with IPRoute() as ipr:
            ipr.link('del', ifname=external)


def test_second_state_dir_without_links_is_refused_in_its_flow(env,
                                                              tmp_path):
    """Without NICs, and with nodes of other names, nothing is refused
    before the flow: the second deployment's flow meets the first one's
    pool, and its rollback leaves every domain, pool, volume and BMC of
    the first."""
    spec = env.spec(count=2, physical_networks=[], node_types={'small': {
        'memory_mb': 128, 'vcpus': 1, 'volumes': [{'capacity': '64MiB'}]}})
    env.deploy(spec)
    ports = [n['bmc_port'] for n in env.nodes()]
    before = inventory(env, ports)
    assert {'domain', 'pool', 'volume', 'BMC'} <= {
        entry.split()[0] for entry in before}

    other = cf.ClusterEnv(tmp_path / 'other', port_base=PORT_BASE)
    with pytest.raises(exceptions.OperationFailed) as raised:
        other.deploy(dict(spec, specs=[dict(
            spec['specs'][0], node_name_prefix=env.node_prefix + 'x')]))
    # The flow ran, and its pool task met the first deployment's mark.
    assert 'pool:' in str(raised.value)
    assert 'tenks:%s:' % env.cluster in str(raised.value)
    assert 'Everything this deploy created was rolled back' in str(
        raised.value)
    assert inventory(env, ports) == before
    assert other.nodes() == []

    env.teardown()
    assert env.leftovers() == []


def libvirtd_pid():
    with open('/run/libvirtd.pid') as f:
        return int(f.read().strip())


def stop_libvirtd():
    pid = libvirtd_pid()
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while os.path.exists('/proc/%d' % pid):
        assert time.monotonic() < deadline, 'libvirtd did not stop'
        time.sleep(0.05)


def start_libvirtd():
    with contextlib.suppress(OSError, ValueError):
        os.kill(libvirtd_pid(), 0)
        return
    subprocess.run(['libvirtd', '-d', '--pid-file', '/run/libvirtd.pid'],
                   check=True, timeout=60)
    deadline = time.monotonic() + 60
    while subprocess.run(['virsh', '-c', cf.URI, 'version'],
                         capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, 'libvirtd did not come back'
        time.sleep(0.2)


def defined(*names):
    """How many of the domains ``names`` libvirt has."""
    conn = libvirt.open(cf.URI)
    try:
        return len({d.name() for d in conn.listAllDomains()} & set(names))
    finally:
        conn.close()


def test_rollback_without_libvirt_keeps_what_a_rerun_needs(env):
    """libvirtd stops right after the domains are defined: what cannot be
    removed stays recorded with its nodes, the message says so, and a
    re-run deploys, then a teardown leaves nothing."""
    # A first cluster makes this state directory's IPMI BMC lock, which
    # we hold so that the next deploy waits in its BMC tasks.
    first = env.spec(count=1, cluster=env.cluster + '-a',
                     bridge_prefix=env.bridge_prefix + 'a',
                     ipmi_port_range_start=PORT_BASE + 10,
                     ipmi_port_range_end=PORT_BASE + 19)
    env.deploy(first)
    spec = env.spec(count=2)
    # Bounded: a request nobody answers fails in seconds, not minutes.
    env.conf.set_override('agent_timeout', 20, group='conductor')
    outcome = {}

    def deploy():
        try:
            outcome['result'] = env.deploy(spec)
        except Exception as e:
            outcome['error'] = e

    try:
        thread = threading.Thread(target=deploy, daemon=True)
        with cf.bmc_changes_held(env.state_dir):
            thread.start()
            deadline = time.monotonic() + 60
            # Each node's request defines its domain, then waits on the
            # held lock to add its BMC.
            # (Node 0 is the first cluster's.)
            while defined(*map(env.node_name, range(3))) < 3:
                assert time.monotonic() < deadline, 'domains never defined'
                assert thread.is_alive(), outcome
                time.sleep(0.05)
            stop_libvirtd()
        # The requests fail (no libvirt) and neither their undo nor the
        # revert can remove the domains: all over well within the
        # agent_timeout of the two requests.
        thread.join(90)
    finally:
        start_libvirtd()
    assert not thread.is_alive(), 'the deploy never finished'

    error = outcome.get('error')
    assert isinstance(error, exceptions.OperationFailed), outcome
    message = str(error)
    assert 'could not be removed' in message
    assert 'deployed before is kept' not in message
    assert 'tenks teardown %s' % env.cluster in message
    # The nodes are kept with what remains of them.
    failed = [n for n in env.nodes() if n['cluster'] == env.cluster]
    assert [n['state'] for n in failed] == ['failed', 'failed']
    for node in failed:
        assert 'domain %s' % node['name'] in message

    # A re-run finishes the job with the same nodes.
    result = env.deploy(spec)
    assert result['changed']
    again = [n for n in env.nodes() if n['cluster'] == env.cluster]
    assert [(n['uuid'], n['state']) for n in again] == [
        (n['uuid'], 'deployed') for n in failed]
    for node in again:
        assert cf.ipmitool(node['bmc_port'], 'power',
                           'status').returncode == 0

    env.teardown()
    with embedded.embedded(env.conf) as conductor:
        conductor.teardowns.teardown(env.cluster + '-a')
    assert env.leftovers() == []


def operations(env, cluster):
    with embedded.embedded(env.conf) as conductor:
        return conductor.records.list_operations(cluster)


def test_flow_that_cannot_be_built_fails_its_operation(env, monkeypatch):
    """A plan whose flow cannot be built (a node in it twice) ends the
    operation failed; nothing stays scheduled, and the same spec deploys
    once the plan is right."""
    spec = env.spec(count=1)
    real_plan = planner.plan_deploy

    def duplicated(*args):
        plan, scheduled = real_plan(*args)
        plan['nodes'] = plan['nodes'] * 2
        return plan, scheduled

    monkeypatch.setattr(planner, 'plan_deploy', duplicated)
    with pytest.raises(Exception, match='is in the plan twice'):
        env.deploy(spec)
    [operation] = operations(env, env.cluster)
    assert operation['state'] == 'failed'
    assert 'is in the plan twice' in operation['error']
    assert env.nodes() == []
    assert env.leftovers() == []

    monkeypatch.setattr(planner, 'plan_deploy', real_plan)
    assert env.deploy(spec)['changed']
    env.teardown()
    assert env.leftovers() == []


def test_stopping_conductor_fails_its_queued_operations(env):
    """With max_operations reached, a second deploy waits; the conductor
    stopping lets the running one finish and ends the queued one."""
    env.conf.set_override('max_operations', 1, group='conductor')
    second = env.spec(count=1, cluster=env.cluster + '-b',
                      bridge_prefix=env.bridge_prefix + 'b',
                      ipmi_port_range_start=PORT_BASE + 20,
                      ipmi_port_range_end=PORT_BASE + 29)
    with embedded.embedded(env.conf) as conductor:
        running = conductor.deployments.submit(env.spec(count=1))
        queued = conductor.deployments.submit(second)
    with embedded.embedded(env.conf) as conductor:
        assert conductor.records.get_operation(running)['state'] == 'succeeded'
        operation = conductor.records.get_operation(queued)
        assert operation['state'] == 'failed'
        assert 'stopped before it began' in operation['error']
        with pytest.raises(exceptions.ClusterNotFound):
            conductor.records.get_cluster(second['cluster'])
        # Its cluster is not left locked.
        conductor.deployments.deploy(second)
        conductor.teardowns.teardown(second['cluster'])
        conductor.teardowns.teardown(env.cluster)
    assert env.leftovers() == []


def test_resume_without_a_flow_fails_with_a_reason(env):
    """A deploy accepted by a conductor that died before its flow was
    saved cannot resume: it fails saying so, and a re-run deploys. Its
    cluster has no record: the next embedded conductor ends it as it
    starts."""
    spec = env.spec(count=1)
    operation_id = str(uuid.uuid4())
    with embedded.embedded(env.conf) as conductor:
        conductor.db.create_operation(operation_id, env.cluster, 'deploy',
                                      conductor.host)
    result = subprocess.run(
        [cf.TENKS, '--state-dir', env.state_dir, 'operation', 'show',
         operation_id, '-f', 'value', '-c', 'state'],
        capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == 'running', result.stderr

    with embedded.embedded(env.conf) as conductor:
        operation = conductor.records.get_operation(operation_id)
        assert operation['state'] == 'failed'
        assert 'no flow was saved' in operation['error']
        assert conductor.deployments.deploy(spec)['changed']
        conductor.teardowns.teardown(env.cluster)
    assert env.leftovers() == []


def test_deploy_stopped_before_its_flow_starts_again_on_resume(env):
    """A conductor stopped while a deploy it accepted was still being
    checked and scheduled: on resume, the same operation runs them."""
    spec = env.spec(count=1)
    operation_id = str(uuid.uuid4())
    with embedded.embedded(env.conf) as conductor:
        # What accepting the request recorded, and nothing more.
        conductor.db.save_cluster(env.cluster, spec, 'scheduled')
        conductor.db.create_operation(operation_id, env.cluster, 'deploy',
                                      conductor.host, spec)
    with embedded.embedded(env.conf) as conductor:
        conductor.resume_interrupted()
        result = conductor.operations.wait(operation_id)
        assert result['resumed'] and result['changed']
        assert [n['state'] for n in conductor.records.list_nodes(
            env.cluster)] == ['deployed']
        conductor.teardowns.teardown(env.cluster)
    assert env.leftovers() == []
