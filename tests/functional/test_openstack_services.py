"""Real Ironic, Placement and Nova API working, through openstacksdk.

Ironic manages a node behind a real virtualbmc BMC of a diskless TCG
domain (named ``os-*``, IPMI on a UDP port in 7400-7449) and fails fast on
a BMC where nothing listens; Nova keeps a flavor's extra specs; Placement
keeps a provider's inventory. Fixtures remove what each test created even
when it fails.
"""

import contextlib
import os
import random
import re
import secrets
import socket
import subprocess
import time

import libvirt
import pytest
from openstack import exceptions

from hostagent.drivers.bmc import virtualbmc
from tests.functional import drivers_fixtures as df
from tests.functional import openstack_fixtures as osf

pytestmark = pytest.mark.functional

URI = 'qemu:///system'
ADDRESS = '127.0.0.1'
USER = 'admin'
DOMAIN_XML = """<domain type='qemu'><name>%s</name>
<memory unit='MiB'>128</memory><vcpu>1</vcpu>
<os><type arch='x86_64'>hvm</type></os></domain>"""


def free_ipmi_port():
    ports = list(range(7400, 7450))
    random.shuffle(ports)
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            with contextlib.suppress(OSError):
                sock.bind((ADDRESS, port))
                return port
    raise RuntimeError('no free UDP port in 7400-7449')


def random_mac():
    return '52:54:00:%02x:%02x:%02x' % tuple(secrets.token_bytes(3))


def ipmi_info(port, password):
    return {'ipmi_address': ADDRESS, 'ipmi_port': port,
            'ipmi_username': USER, 'ipmi_password': password}


@pytest.fixture(scope='module')
def conn(openstack_services):  # noqa: F811
    return osf.connection()


@pytest.fixture
def cleanups():
    """Callables run at teardown, last first; all run, errors reported."""
    funcs = []
    yield funcs
    errors = []
    for func in reversed(funcs):
        try:
            func()
        except Exception as e:
            errors.append('%s: %s' % (func, e))
    assert not errors, 'clean-up failed: %s' % errors


@pytest.fixture
def bmc(tmp_path, cleanups):
    """A domain behind a running BMC: (libvirt domain, port, password)."""
    name = 'os-' + secrets.token_hex(3)
    port = free_ipmi_port()
    password = secrets.token_hex(8)
    driver = virtualbmc.VirtualBmcDriver(df.make_conf(tmp_path,
                                                      libvirt_uri=URI))
    lv = libvirt.open(URI)
    cleanups.append(lv.close)

    def remove_domain():
        with contextlib.suppress(libvirt.libvirtError):
            domain = lv.lookupByName(name)
            if domain.isActive():
                domain.destroy()
            domain.undefine()

    def remove_bmc():
        driver.remove_bmc(name, df.OWNER)
        if driver._proc is not None:
            driver._proc.wait()  # reap the IPMI host this process started

    lv.defineXML(DOMAIN_XML % name)
    cleanups.append(remove_domain)
    cleanups.append(remove_bmc)
    driver.ensure_bmc(name, ADDRESS, port, USER, password, df.OWNER)
    return lv.lookupByName(name), port, password


@pytest.fixture
def make_node(conn, cleanups):
    """make(**attrs) creates an Ironic node, deleted at teardown."""

    def make(**attrs):
        node = conn.baremetal.create_node(**attrs)

        def delete():
            with contextlib.suppress(exceptions.NotFoundException):
                osf.wait_for_node(conn, node.id)
                conn.baremetal.delete_node(node.id)

        cleanups.append(delete)
        return node

    return make


def act(conn, node, action):
    """Run a provision action; return the node once it is over and the
    seconds that took."""
    started = time.monotonic()
    conn.baremetal.set_node_provision_state(node.id, action)
    node = osf.wait_for_node(conn, node.id)
    return node, time.monotonic() - started


def power(conn, node, target):
    conn.baremetal.set_node_power_state(node.id, target)
    return osf.wait_for_node(conn, node.id)


def test_node_behind_virtualbmc_becomes_available(conn, bmc, make_node,
                                                  capsys):
    domain, port, password = bmc
    node = make_node(driver='ipmi', name=domain.name(),
                     driver_info=ipmi_info(port, password))
    mac = random_mac()
    nic = conn.baremetal.create_port(node_id=node.id, address=mac,
                                     physical_network='physnet1')
    assert nic.physical_network == 'physnet1'
    assert node.provision_state == 'enroll'

    node, managed = act(conn, node, 'manage')
    assert node.provision_state == 'manageable', node.last_error
    assert node.power_state == 'power off'  # read over IPMI
    node, provided = act(conn, node, 'provide')
    assert node.provision_state == 'available', node.last_error
    assert [p.address for p in conn.baremetal.ports(node_id=node.id)] == [mac]

    # Ironic drives the domain through the BMC.
    assert power(conn, node, 'power on').power_state == 'power on'
    assert domain.isActive()
    assert power(conn, node, 'power off').power_state == 'power off'
    assert not domain.isActive()

    conn.baremetal.delete_node(node.id)
    assert conn.baremetal.find_node(node.id) is None
    for name in ('ironic', 'ironic-conductor'):  # the API, the conductor
        log = os.path.join(osf.services.state_dir(), 'logs', name + '.log')
        with open(log) as f:
            assert password not in f.read(), log
    with capsys.disabled():
        print('\nopenstack services: start %.1f s (started: %s); manage '
              '%.2f s; provide -> available %.2f s'
              % (osf.TIMINGS['start'],
                 ', '.join(osf.TIMINGS['started']) or 'none',
                 managed, provided))


def test_manage_fails_fast_without_bmc(conn, make_node):
    node = make_node(driver='ipmi', name='os-nobmc-' + secrets.token_hex(3),
                     driver_info=ipmi_info(free_ipmi_port(), 'unused'))
    node, elapsed = act(conn, node, 'manage')
    assert node.provision_state == 'enroll'
    assert 'power state' in node.last_error
    # Ironic retries ipmitool for the test services' [ipmi]
    # command_retry_timeout (30 s), not its default 60 s.
    assert elapsed < 45


def test_flavor_extra_specs(conn, cleanups):
    specs = {'resources:CUSTOM_GOLD': '1', 'resources:VCPU': '0',
             'resources:MEMORY_MB': '0', 'resources:DISK_GB': '0',
             'trait:CUSTOM_X': 'required'}
    flavor = conn.compute.create_flavor(
        name='os-gold-' + secrets.token_hex(3), ram=1024, vcpus=1, disk=10)
    cleanups.append(lambda: conn.compute.delete_flavor(
        flavor, ignore_missing=True))
    conn.compute.create_flavor_extra_specs(flavor, specs)

    assert conn.compute.fetch_flavor_extra_specs(flavor).extra_specs == specs
    assert conn.compute.get_flavor(flavor.id).extra_specs == specs
    conn.compute.delete_flavor(flavor)
    assert conn.compute.find_flavor(flavor.id) is None


def test_placement_provider_inventory(conn, cleanups):
    rc = 'CUSTOM_TENKS_' + secrets.token_hex(3).upper()
    conn.placement.create_resource_class(name=rc)
    cleanups.append(lambda: conn.placement.delete_resource_class(
        rc, ignore_missing=True))
    provider = conn.placement.create_resource_provider(
        name='os-rp-' + secrets.token_hex(3))
    cleanups.append(lambda: conn.placement.delete_resource_provider(
        provider, ignore_missing=True))

    conn.placement.create_resource_provider_inventory(
        provider, resource_class=rc, total=1)
    inventories = list(conn.placement.resource_provider_inventories(
        provider))
    assert [(i.resource_class, i.total) for i in inventories] == [(rc, 1)]
    assert provider.id in [p.id for p in
                           conn.placement.resource_providers()]
    conn.placement.delete_resource_provider(provider)
    assert provider.id not in [p.id for p in
                               conn.placement.resource_providers()]


def test_services_listen_on_loopback_only(openstack_services):
    services = osf.services
    out = subprocess.run(['ss', '-Htulnp'], capture_output=True, text=True,
                         check=True).stdout
    for name in services.SERVICES:
        pid, port = services.running(services.state_dir(), name)
        pids = set(services.group_members(pid))
        local = [line.split()[4] for line in out.splitlines()
                 if pids & set(map(int, re.findall(r'pid=(\d+)', line)))]
        assert local == ['%s:%d' % (ADDRESS, port)], name
