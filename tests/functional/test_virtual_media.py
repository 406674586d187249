"""Redfish virtual media on real domains: an ISO this module builds
(xorriso, isolinux) served over HTTP on loopback, inserted through the
emulator's Redfish API and by Ironic's redfish-virtual-media boot
interface; the domain boots it (its console log shows the ISO's
greeting). IPMI ports 9980-9999, Redfish ports 9091-9093."""

import functools
import http.server
import os
import re
import shutil
import subprocess
import threading
import time
from xml.etree import ElementTree as ET

import libvirt
import pytest
import requests

from hostagent.drivers.bmc import media
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of
from tests.functional import test_redfish

pytestmark = pytest.mark.functional

AUTH = test_redfish.AUTH
CD = '/VirtualMedia/Cd'
INSERT = CD + '/Actions/VirtualMedia.InsertMedia'
EJECT = CD + '/Actions/VirtualMedia.EjectMedia'
ISOLINUX = '/usr/lib/ISOLINUX/isolinux.bin'
LDLINUX = '/usr/lib/syslinux/modules/bios/ldlinux.c32'


def build_iso(directory, greeting):
    """A BIOS-bootable ISO whose isolinux prints ``greeting`` on the
    serial console (then waits: it has no kernel)."""
    tree = os.path.join(directory, greeting)
    os.makedirs(os.path.join(tree, 'isolinux'))
    for source in (ISOLINUX, LDLINUX):
        shutil.copy(source, os.path.join(tree, 'isolinux'))
    with open(os.path.join(tree, 'isolinux', 'isolinux.cfg'), 'w') as f:
        f.write('SERIAL 0 115200\nSAY %s\nPROMPT 0\nDEFAULT none\n'
                % greeting)
    iso = os.path.join(directory, greeting + '.iso')
    subprocess.run(['xorriso', '-as', 'mkisofs', '-quiet', '-o', iso,
                    '-b', 'isolinux/isolinux.bin', '-c', 'isolinux/boot.cat',
                    '-no-emul-boot', '-boot-load-size', '4',
                    '-boot-info-table', tree], check=True)
    return iso


@pytest.fixture
def isos(tmp_path):
    """{name: URL} of two ISOs served on loopback, FIRST and SECOND."""
    directory = str(tmp_path / 'isos')
    os.mkdir(directory)
    token = os.urandom(4).hex().upper()
    names = {key: build_iso(directory, 'TENKS-%s-%s' % (key, token))
             for key in ('FIRST', 'SECOND')}
    handler = functools.partial(QuietHandler, directory=directory)
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = 'http://127.0.0.1:%d/' % server.server_address[1]
    yield {key: (base + os.path.basename(iso),
                 os.path.basename(iso)[:-len('.iso')])
           for key, iso in names.items()}
    server.shutdown()
    server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def drive(name, flags):
    """The source file of the domain's virtual media drive, or None."""
    conn = libvirt.open(cf.URI)
    try:
        root = ET.fromstring(conn.lookupByName(name).XMLDesc(flags))
    finally:
        conn.close()
    [disk] = [d for d in root.findall('devices/disk')
              if d.find('alias') is not None
              and d.find('alias').get('name') == media.DRIVE_ALIAS]
    source = disk.find('source')
    return None if source is None else source.get('file')


def console(env, name):
    """The node's console log, without the terminal's escapes
    (SeaBIOS and isolinux also draw the screen on it)."""
    path = os.path.join(env.state_dir, 'logs', 'console',
                        '%s-console.log' % name)
    try:
        with open(path, errors='replace') as f:
            return re.sub(r'\x1b\[[0-9;]*[A-Za-z]', '', f.read())
    except FileNotFoundError:
        return ''


def wait_for_console(env, name, text, timeout=60):
    deadline = time.monotonic() + timeout
    while text not in console(env, name):
        assert time.monotonic() < deadline, (
            '%r not on the console of %s within %d s: %r'
            % (text, name, timeout, console(env, name)[-500:]))
        time.sleep(0.5)


@pytest.fixture
def env(tmp_path):
    with cf.checked(test_redfish.RedfishEnv(tmp_path, port_base=9990)) \
            as cluster:
        yield cluster


def test_an_inserted_iso_boots_and_eject_and_a_second_insert_work(
        env, tmp_path, isos):
    spec = env.redfish_spec(9091)
    env.deploy(spec)
    [node] = env.nodes()
    name = node['name']
    url = functools.partial(test_redfish.url, node)
    inactive = libvirt.VIR_DOMAIN_XML_INACTIVE
    assert drive(name, inactive) is None

    # Another cluster's emulator and credentials reach nothing of mine.
    other = test_redfish.RedfishEnv(tmp_path / 'other', port_base=9980)
    other.conf, other.state_dir = env.conf, env.state_dir
    try:
        other.deploy(other.redfish_spec(9092, redfish_password='other-pw'))
        first_url, first = isos['FIRST']
        theirs = 'http://127.0.0.1:9092/redfish/v1/Systems/' + node['uuid']
        for target, auth in [(url(INSERT), ('admin', 'other-pw')),
                             (theirs + INSERT, ('admin', 'other-pw'))]:
            answer = requests.post(target, json={'Image': first_url},
                                   auth=auth, timeout=60)
            assert answer.status_code in (401, 404), answer.text
        assert drive(name, inactive) is None
    finally:
        other.teardown()
        left = other.leftovers()
        other.force_clean()
        assert left == []

    # Insert, boot from CD once, power on: the ISO boots.
    answer = requests.post(url(INSERT), json={'Image': first_url},
                           auth=AUTH, timeout=60)
    assert answer.status_code == 204, answer.text
    medium = drive(name, inactive)
    media_dir = os.path.dirname(medium)
    assert os.path.dirname(media_dir) == env.conf.hostagent.pool_dir
    assert os.stat(media_dir).st_mode & 0o777 == 0o711
    assert os.stat(medium).st_mode & 0o777 == 0o600
    assert os.listdir(media_dir) == [os.path.basename(medium)]
    state = requests.get(url(CD), auth=AUTH, timeout=30).json()
    assert (state['Inserted'], state['Image']) == (True, first_url)
    for path, body in [
            ('', {'Boot': {'BootSourceOverrideTarget': 'Cd',
                           'BootSourceOverrideEnabled': 'Once'}}),
            ('/Actions/ComputerSystem.Reset', {'ResetType': 'On'})]:
        answer = requests.request('PATCH' if not path else 'POST',
                                  url(path), json=body, auth=AUTH,
                                  timeout=30)
        assert answer.status_code in (200, 204), answer.text
    wait_for_console(env, name, first)

    # Eject, running: the drive is empty, live too, and the file gone.
    answer = requests.post(url(EJECT), json={}, auth=AUTH, timeout=60)
    assert answer.status_code == 204, answer.text
    assert drive(name, inactive) is None and drive(name, 0) is None
    assert os.listdir(media_dir) == []

    # A second insert, live; a reset boots it.
    second_url, second = isos['SECOND']
    answer = requests.post(url(INSERT), json={'Image': second_url},
                           auth=AUTH, timeout=60)
    assert answer.status_code == 204, answer.text
    assert drive(name, 0) == drive(name, inactive) != medium
    answer = requests.post(url('/Actions/ComputerSystem.Reset'),
                           json={'ResetType': 'ForceRestart'}, auth=AUTH,
                           timeout=30)
    assert answer.status_code in (200, 204), answer.text
    wait_for_console(env, name, second)

    # A medium is not drift: audit finds nothing, a re-run changes nothing.
    assert env.audit(env.cluster) == {'drift': [], 'other': [],
                                      'removed': []}
    assert env.deploy(spec)['changed'] == []
    assert drive(name, 0) == drive(name, inactive)

    # Teardown leaves neither the medium nor its directory.
    env.teardown()
    assert not os.path.exists(media_dir)


@pytest.fixture
def cloud_env(tmp_path, openstack_services, cloud):
    cluster = test_redfish.RedfishEnv(tmp_path, port_base=9980)
    of.use_services(cluster, openstack_services)
    yield cluster
    assert of.cleaned_up(cluster, cloud) == []


def test_ironic_deploys_a_ramdisk_node_from_an_iso_by_virtual_media(
        cloud_env, cloud, isos):
    env = cloud_env
    spec = env.redfish_spec(9093)
    spec['specs'][0]['ironic_config'] = {
        'resource_class': 'tenks-vmedia',
        'boot_interface': 'redfish-virtual-media',
        'deploy_interface': 'ramdisk'}
    env.deploy(spec)
    [node] = env.nodes()
    iso_url, greeting = isos['FIRST']
    ironic = cloud.baremetal.get_node(node['uuid'])
    assert (ironic.provision_state, ironic.boot_interface,
            ironic.deploy_interface) == ('available', 'redfish-virtual-media',
                                         'ramdisk')
    # Ironic hands the ISO's URL to the BMC, which downloads it.
    cloud.baremetal.patch_node(ironic, [{
        'op': 'add', 'path': '/instance_info',
        'value': {'boot_iso': iso_url,
                  'ramdisk_image_download_source': 'http'}}])
    cloud.baremetal.set_node_provision_state(ironic, 'active')
    ironic = of.wait_for_node(cloud, ironic.id, timeout=120)
    assert (ironic.provision_state, ironic.power_state) == (
        'active', 'power on'), ironic.last_error
    wait_for_console(env, node['name'], greeting)
    medium = drive(node['name'], libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert os.path.isfile(medium)

    # Undeploy: Ironic ejects the medium (its file goes) and powers off.
    cloud.baremetal.set_node_provision_state(ironic, 'deleted')
    ironic = of.wait_for_node(cloud, ironic.id, timeout=120)
    assert ironic.provision_state == 'available', ironic.last_error
    assert drive(node['name'], libvirt.VIR_DOMAIN_XML_INACTIVE) is None
    assert not os.path.exists(medium)
    env.teardown()
