"""The spec the DevStack plugin writes from DevStack's variables: the
mapping (devstack/tenks_spec.py), and devstack/settings + lib/tenks run
by bash with DevStack's functions stood in (tests/devstack)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tenks import spec as tenks_spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DEVSTACK = os.path.join(ROOT, 'devstack')
STANDIN = os.path.join(ROOT, 'tests', 'devstack', 'functions-standin.sh')

_module = importlib.util.spec_from_file_location(
    'tenks_spec_of_devstack', os.path.join(DEVSTACK, 'tenks_spec.py'))
mapping = importlib.util.module_from_spec(_module)
_module.loader.exec_module(mapping)

# What devstack/settings gives a local.conf that sets nothing.
DEFAULTS = {
    'TENKS_CLUSTER': 'devstack', 'TENKS_VM_COUNT': '1',
    'TENKS_NODE_NAME_PREFIX': 'node-', 'TENKS_BRIDGE_PREFIX': 'brtenks',
    'TENKS_BMC_ADDRESS': '192.0.2.10', 'TENKS_PHYSICAL_NETWORK': 'physnet1',
    'IRONIC_VM_SPECS_RAM': '3072', 'IRONIC_VM_SPECS_CPU': '1',
    'IRONIC_VM_SPECS_DISK': '10', 'IRONIC_VM_SPECS_DISK_FORMAT': 'qcow2',
    'IRONIC_VM_VOLUME_COUNT': '1', 'IRONIC_VM_INTERFACE_COUNT': '2',
    'IRONIC_VM_ENGINE': 'qemu', 'IRONIC_VM_LOG_CONSOLE': 'True',
    'IRONIC_VM_NETWORK_BRIDGE': 'brbm', 'IRONIC_NETWORK_SIMULATOR': 'ovs',
    'IRONIC_DEPLOY_DRIVER': 'ipmi', 'IRONIC_BOOT_MODE': 'uefi',
    'IRONIC_SECURE_BOOT': 'False', 'IRONIC_VBMC_PORT_RANGE_START': '6230',
    'IRONIC_REDFISH_EMULATOR_PORT': '9132',
    'IRONIC_DEFAULT_RESOURCE_CLASS': 'baremetal',
    'IRONIC_DEFAULT_TRAITS': 'CUSTOM_GOLD',
}


def test_ironic_defaults_become_a_spec_tenks_accepts():
    data, warnings = mapping.spec(DEFAULTS)
    assert data == {
        'cluster': 'devstack',
        'node_types': {'devstack': {
            'memory_mb': 3072, 'vcpus': 1,
            'volumes': [{'capacity': '10GiB', 'format': 'qcow2'}],
            'physical_networks': ['physnet1'], 'ironic_driver': 'ipmi',
            'boot_mode': 'uefi', 'secure_boot': False,
            'console_log_enabled': True}},
        'specs': [{'type': 'devstack', 'count': 1,
                   'node_name_prefix': 'node-',
                   'ironic_config': {'resource_class': 'baremetal',
                                     'traits': ['CUSTOM_GOLD']}}],
        'physical_networks': ['physnet1'],
        'physnet_mappings': {'physnet1': 'brbm'},
        'bridge_type': 'openvswitch', 'bridge_prefix': 'brtenks',
        'ipmi_address': '192.0.2.10', 'ipmi_port_range_start': 6230,
        'ipmi_port_range_end': 6230, 'redfish_port': 9132,
        'libvirt_domain_type': 'qemu',
    }
    assert warnings == [
        'IRONIC_VM_INTERFACE_COUNT=2: Tenks gives a node one NIC per '
        'physical network, here one on physnet1']
    validated = tenks_spec.validate(json.loads(json.dumps(data)),
                                    source='devstack')
    assert validated['specs'][0]['count'] == 1


def test_a_redfish_job_of_three_bios_nodes_on_a_linux_bridge():
    data, warnings = mapping.spec(dict(
        DEFAULTS, TENKS_VM_COUNT='3', IRONIC_DEPLOY_DRIVER='redfish',
        IRONIC_BOOT_MODE='bios', IRONIC_VM_INTERFACE_COUNT='1',
        IRONIC_VM_VOLUME_COUNT='2', IRONIC_VM_SPECS_DISK_FORMAT='raw',
        IRONIC_NETWORK_SIMULATOR='linuxbridge', IRONIC_VM_NETWORK_BRIDGE='',
        IRONIC_VM_ENGINE='kvm', IRONIC_DEFAULT_TRAITS='',
        IRONIC_SECURE_BOOT='False'))
    assert warnings == []
    node_type = data['node_types']['devstack']
    assert (node_type['ironic_driver'], node_type['boot_mode']) == (
        'redfish', 'bios')
    assert node_type['volumes'] == [{'capacity': '10GiB',
                                     'format': 'raw'}] * 2
    assert (data['bridge_type'], data['libvirt_domain_type']) == (
        'linuxbridge', 'kvm')
    assert 'physnet_mappings' not in data
    assert data['specs'][0]['ironic_config']['traits'] == []
    # One IPMI port per node, as DevStack gives them.
    assert (data['ipmi_port_range_start'], data['ipmi_port_range_end']) == (
        6230, 6232)
    tenks_spec.validate(json.loads(json.dumps(data)), source='devstack')


@pytest.mark.parametrize('name,value,error', [
    ('IRONIC_DEPLOY_DRIVER', 'idrac',
     'IRONIC_DEPLOY_DRIVER=idrac: Tenks takes ipmi or redfish'),
    ('IRONIC_NETWORK_SIMULATOR', 'sonic',
     'IRONIC_NETWORK_SIMULATOR=sonic: Tenks takes linuxbridge or ovs'),
    ('IRONIC_VM_ENGINE', 'auto',
     'IRONIC_VM_ENGINE=auto: Tenks takes kvm or qemu'),
    ('IRONIC_VM_SPECS_RAM', '3G',
     'IRONIC_VM_SPECS_RAM=3G: not a whole number'),
])
def test_what_tenks_cannot_follow_is_named(name, value, error):
    with pytest.raises(mapping.Unmappable) as raised:
        mapping.spec(dict(DEFAULTS, **{name: value}))
    assert str(raised.value) == error


def devstack(tmp_path, script, **variables):
    """``script`` run by bash after DevStack's functions (stood in), the
    ``variables`` of local.conf and devstack/settings."""
    lines = ['set -o errexit -o nounset -o pipefail',
             'source %s' % STANDIN]
    lines += ['%s=%s' % item for item in variables.items()]
    lines += ['source %s/settings' % DEVSTACK, script]
    return subprocess.run(
        ['bash', '-c', '\n'.join(lines)], capture_output=True, text=True,
        timeout=60, env=dict(os.environ, DATA_DIR=str(tmp_path),
                             TENKS_VENV=os.path.dirname(os.path.dirname(
                                 sys.executable))))


def test_settings_and_lib_write_the_spec_of_a_local_conf(tmp_path):
    done = devstack(
        tmp_path,
        'source %s/lib/tenks\nwrite_tenks_spec\n'
        'echo "IRONIC_VM_COUNT=$IRONIC_VM_COUNT"\n'
        'echo "SPEC=$TENKS_SPEC_FILE"' % DEVSTACK,
        IRONIC_VM_COUNT=2, IRONIC_VM_SPECS_RAM=1024, HOST_IP='192.0.2.10',
        NEUTRON_PHYSICAL_NETWORK='mynetwork', IRONIC_VM_LOG_CONSOLE='no')
    assert done.returncode == 0, done.stderr
    out = dict(line.split('=', 1) for line in done.stdout.splitlines()
               if '=' in line)
    # Ironic's plugin is left no VM to make: Tenks makes them.
    assert out['IRONIC_VM_COUNT'] == '0'
    assert out['SPEC'] == str(tmp_path / 'tenks-cluster.json')
    with open(out['SPEC']) as f:
        data = json.load(f)
    expected, _ = mapping.spec(dict(
        DEFAULTS, TENKS_VM_COUNT='2', IRONIC_VM_SPECS_RAM='1024',
        TENKS_PHYSICAL_NETWORK='mynetwork', IRONIC_VM_LOG_CONSOLE='False'))
    assert data == json.loads(json.dumps(expected))
    assert ('tenks_spec.py: warning: IRONIC_VM_INTERFACE_COUNT=2'
            in done.stderr)
    assert 'valid: cluster devstack, 2 node(s)' in done.stdout


def test_settings_refuse_what_tenks_cannot_follow(tmp_path):
    done = devstack(tmp_path, 'source %s/lib/tenks\nwrite_tenks_spec'
                    % DEVSTACK, IRONIC_DEPLOY_DRIVER='idrac')
    assert done.returncode == 1
    assert ('tenks_spec.py: IRONIC_DEPLOY_DRIVER=idrac: Tenks takes ipmi '
            'or redfish') in done.stderr
    assert 'Cannot make a Tenks spec of these DevStack variables' in (
        done.stderr)
    assert os.listdir(tmp_path) == []
