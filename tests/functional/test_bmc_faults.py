"""BMC faults on real BMCs: a cluster of one IPMI node (Tenks' IPMI
host) and one Redfish node (its sushy-tools emulator) in front of real
libvirt domains, each fault kind driven with ipmitool and with Redfish
HTTP requests. What Ironic makes of them: test_ironic_bmc_faults.

Names carry the test's random token; IPMI ports 9860-9869, Redfish
9870-9871.
"""

import contextlib
import os
import signal
import subprocess
import time
from xml.etree import ElementTree as ET

import libvirt
import pytest
import requests

from hostagent.drivers.bmc import fault_files
from tenks.cli import embedded
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of
from tests.functional import test_redfish as rf

pytestmark = pytest.mark.functional

AUTH = ('admin', 'rf-pw')


def ipmitool(node, *command):
    """ipmitool against the node's BMC, giving up after ~3 s of
    silence."""
    return subprocess.run(
        ['ipmitool', '-I', 'lanplus', '-H', node['bmc_address'], '-p',
         str(node['bmc_port']), '-U', 'admin', '-P', 'password', '-R', '1',
         '-N', '3', *command], capture_output=True, text=True, timeout=60)


def redfish(method, node, path='', **kwargs):
    return requests.request(method, rf.url(node, path), auth=AUTH,
                            timeout=30, **kwargs)


def boot_target(node):
    return redfish('GET', node).json()['Boot']['BootSourceOverrideTarget']


def boot_order(name):
    """The boot devices of the domain's definition (what it boots
    from next)."""
    conn = libvirt.open(cf.URI)
    try:
        xml = ET.fromstring(conn.lookupByName(name).XMLDesc(
            libvirt.VIR_DOMAIN_XML_INACTIVE))
    finally:
        conn.close()
    return [boot.get('dev') for boot in xml.findall('os/boot')]


def stays(name, state, seconds=2):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert rf.domain_state(name) == state
        time.sleep(0.2)


def timed(call, *args, **kwargs):
    started = time.monotonic()
    result = call(*args, **kwargs)
    return result, time.monotonic() - started


def spec(env, port):
    return rf.mixed_spec(env, port, redfish_password=AUTH[1],
                         ipmi_port_range_start=env.port_base,
                         ipmi_port_range_end=env.port_base + 9)


def enrolled(tmp_path, endpoints, cloud, port_base):
    """The body of a fixture: the cluster, enrolled in the test Ironic,
    its IPMI ports from ``port_base``; what it left checked after."""
    cluster = rf.RedfishEnv(tmp_path, port_base=port_base)
    of.use_services(cluster, endpoints)
    yield cluster
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


@pytest.fixture
def env(tmp_path, openstack_services, cloud):
    yield from enrolled(tmp_path, openstack_services, cloud, 9860)


def ironic_power(cloud, nodes, state):
    """Ask Ironic to set the nodes' power state, all at once; the nodes
    once Ironic is done."""
    for node in nodes:
        cloud.baremetal.set_node_power_state(node['uuid'], state)
    return [of.wait_for_node(cloud, node['uuid'], timeout=120)
            for node in nodes]


def test_each_fault_kind_on_real_ipmi_and_redfish_bmcs(env):
    with embedded.embedded(env.conf) as conductor:
        conductor.deployments.deploy(spec(env, 9870))
        nodes = {n['bmc_type']: n for n in env.nodes()}
        ipmi, red = nodes['ipmi'], nodes['redfish']
        faults = conductor.bmc_faults

        def fault(node, kind, duration=None, probability=None):
            shown = faults.set(node['name'], kind, duration, probability)
            assert shown['bmc_fault']['kind'] == kind

        def clear(node):
            assert faults.clear(node['name'])['cleared'] == [node['name']]

        assert ipmitool(ipmi, 'power', 'status').returncode == 0
        assert redfish('GET', red).status_code == 200

        # unreachable: no answer; the service root still answers.
        for node in (ipmi, red):
            fault(node, 'unreachable')
        assert ipmitool(ipmi, 'power', 'status').returncode != 0
        with pytest.raises(requests.ConnectionError):
            redfish('GET', red)
        assert requests.get('http://127.0.0.1:9870/redfish/v1',
                            timeout=5).status_code == 200
        for node in (ipmi, red):
            clear(node)
        assert ipmitool(ipmi, 'power', 'status').returncode == 0
        assert redfish('GET', red).status_code == 200

        # slow: the same answers, late.
        _, quick = timed(ipmitool, ipmi, 'power', 'status')
        fault(ipmi, 'slow', 0.4)
        fault(red, 'slow', 1.5)
        done, late = timed(ipmitool, ipmi, 'power', 'status')
        assert done.returncode == 0, done.stderr
        assert late > quick + 1.5  # every packet of the session is late
        answer, late = timed(redfish, 'GET', red)
        assert answer.status_code == 200 and late >= 1.5

        # error, and flaky failing every time: a completion code, a 500.
        for kind, probability in (('error', None), ('flaky', 1)):
            for node in (ipmi, red):
                fault(node, kind, probability=probability)
            failed = ipmitool(ipmi, 'power', 'status')
            assert failed.returncode != 0
            assert 'Unspecified error' in failed.stderr, failed.stderr
            assert redfish('GET', red).status_code == 500
        for node in (ipmi, red):
            clear(node)

        # power-stuck: power on acknowledged, never made.
        for node in (ipmi, red):
            fault(node, 'power-stuck')
        assert ipmitool(ipmi, 'power', 'on').returncode == 0
        assert redfish('POST', red, '/Actions/ComputerSystem.Reset',
                       json={'ResetType': 'On'}).status_code == 204
        for node in (ipmi, red):
            stays(node['name'], libvirt.VIR_DOMAIN_SHUTOFF)
        assert 'Chassis Power is off' in ipmitool(
            ipmi, 'power', 'status').stdout
        assert redfish('GET', red).json()['PowerState'] == 'Off'

        # boot-device-ignored: acknowledged, not set.
        for node in (ipmi, red):
            fault(node, 'boot-device-ignored')
        booting = boot_order(ipmi['name'])
        assert booting != ['cdrom']
        assert ipmitool(ipmi, 'chassis', 'bootdev', 'cdrom').returncode == 0
        assert boot_order(ipmi['name']) == booting
        target = boot_target(red)
        assert target != 'Hdd'
        assert redfish('PATCH', red, json={'Boot': {
            'BootSourceOverrideTarget': 'Hdd',
            'BootSourceOverrideEnabled': 'Once'}}).status_code == 204
        assert boot_target(red) == target

        # The node's record shows it.
        assert {n['bmc_type']: n['bmc_fault'] for n in env.nodes()} == {
            'ipmi': {'kind': 'boot-device-ignored'},
            'redfish': {'kind': 'boot-device-ignored'}}
        for node in (ipmi, red):
            fault(node, 'error')

    # The hostagent has gone: the BMC daemons still show the faults, and
    # so do daemons started again.
    assert redfish('GET', red).status_code == 500
    for pid in env.emulator_pids() + sorted(cf.ipmi_host_pids(
            env.state_dir)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    env.deploy(spec(env, 9870))  # repairs both
    assert redfish('GET', red).status_code == 500
    assert ipmitool(ipmi, 'power', 'status').returncode != 0

    with embedded.embedded(env.conf) as conductor:
        assert conductor.bmc_faults.clear(all_nodes=True) == {
            'cleared': sorted([ipmi['name'], red['name']]), 'failed': {}}
    # Well again: what the faults refused is done.
    rf.wait_state(ipmi['name'], libvirt.VIR_DOMAIN_SHUTOFF)
    assert ipmitool(ipmi, 'power', 'on').returncode == 0
    rf.wait_state(ipmi['name'], libvirt.VIR_DOMAIN_RUNNING)
    assert ipmitool(ipmi, 'chassis', 'bootdev', 'cdrom').returncode == 0
    assert boot_order(ipmi['name']) == ['cdrom']
    answer = redfish('PATCH', red, json={'Boot': {
        'BootSourceOverrideTarget': 'Hdd',
        'BootSourceOverrideEnabled': 'Once'}})
    assert answer.status_code == 204, answer.text
    assert boot_target(red) == 'Hdd'
    assert redfish('POST', red, '/Actions/ComputerSystem.Reset',
                   json={'ResetType': 'On'}).status_code == 204
    rf.wait_state(red['name'], libvirt.VIR_DOMAIN_RUNNING)

    # A teardown removes the faults with the BMCs.
    with embedded.embedded(env.conf) as conductor:
        conductor.bmc_faults.set(red['name'], 'error')
        conductor.bmc_faults.set(ipmi['name'], 'error')
    env.teardown()
    assert fault_files.read_all(os.path.join(env.state_dir, 'ipmi')) == {}
    assert env.sushy_dirs() == []
