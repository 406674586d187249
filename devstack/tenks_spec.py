"""The Tenks cluster spec of a DevStack run: Ironic's DevStack variables
(IRONIC_VM_*, IRONIC_DEPLOY_DRIVER, IRONIC_BOOT_MODE, the physical
network and its bridge...) as Ironic's own plugin reads them to make its
VMs, mapped to a spec. devstack/settings gives every variable its
default; this reads them from the environment and prints the spec as
JSON (which is YAML) on stdout, and what it cannot map on stderr.

    python tenks_spec.py > cluster.json
    python tenks_spec.py --variables     # the names it reads
"""

import json
import os
import sys

# Each variable the spec is made of (devstack/settings sets them all).
VARIABLES = (
    'TENKS_CLUSTER', 'TENKS_VM_COUNT', 'TENKS_NODE_NAME_PREFIX',
    'TENKS_BRIDGE_PREFIX', 'TENKS_BMC_ADDRESS', 'TENKS_PHYSICAL_NETWORK',
    'IRONIC_VM_SPECS_RAM', 'IRONIC_VM_SPECS_CPU', 'IRONIC_VM_SPECS_DISK',
    'IRONIC_VM_SPECS_DISK_FORMAT', 'IRONIC_VM_VOLUME_COUNT',
    'IRONIC_VM_INTERFACE_COUNT', 'IRONIC_VM_ENGINE', 'IRONIC_VM_LOG_CONSOLE',
    'IRONIC_VM_NETWORK_BRIDGE', 'IRONIC_NETWORK_SIMULATOR',
    'IRONIC_DEPLOY_DRIVER', 'IRONIC_BOOT_MODE', 'IRONIC_SECURE_BOOT',
    'IRONIC_VBMC_PORT_RANGE_START', 'IRONIC_REDFISH_EMULATOR_PORT',
    'IRONIC_DEFAULT_RESOURCE_CLASS', 'IRONIC_DEFAULT_TRAITS',
)

BRIDGE_TYPES = {'ovs': 'openvswitch', 'linuxbridge': 'linuxbridge'}


class Unmappable(ValueError):
    pass


def _choice(variables, name, choices):
    value = variables[name]
    if value not in choices:
        raise Unmappable('%s=%s: Tenks takes %s' % (
            name, value, ' or '.join(sorted(choices))))
    return value


def _boolean(variables, name):
    # DevStack's trueorfalse has normalised it.
    return _choice(variables, name, ('True', 'False')) == 'True'


def _integer(variables, name):
    try:
        return int(variables[name])
    except ValueError:
        raise Unmappable('%s=%s: not a whole number'
                         % (name, variables[name])) from None


def spec(variables):
    """(the spec, warnings) of ``variables`` ({name: value}, every one of
    VARIABLES); Unmappable names a variable Tenks cannot follow."""
    missing = [name for name in VARIABLES if name not in variables]
    if missing:
        raise Unmappable('not set: %s (devstack/settings sets them)'
                         % ', '.join(missing))
    warnings = []
    count = _integer(variables, 'TENKS_VM_COUNT')
    physnet = variables['TENKS_PHYSICAL_NETWORK']
    interfaces = _integer(variables, 'IRONIC_VM_INTERFACE_COUNT')
    if interfaces != 1:
        warnings.append(
            'IRONIC_VM_INTERFACE_COUNT=%d: Tenks gives a node one NIC per '
            'physical network, here one on %s' % (interfaces, physnet))
    start = _integer(variables, 'IRONIC_VBMC_PORT_RANGE_START')
    node_type = {
        'memory_mb': _integer(variables, 'IRONIC_VM_SPECS_RAM'),
        'vcpus': _integer(variables, 'IRONIC_VM_SPECS_CPU'),
        'volumes': [{
            'capacity': '%dGiB' % _integer(variables,
                                           'IRONIC_VM_SPECS_DISK'),
            'format': _choice(variables, 'IRONIC_VM_SPECS_DISK_FORMAT',
                              ('qcow2', 'raw')),
        }] * _integer(variables, 'IRONIC_VM_VOLUME_COUNT'),
        'physical_networks': [physnet],
        'ironic_driver': _choice(variables, 'IRONIC_DEPLOY_DRIVER',
                                 ('ipmi', 'redfish')),
        'boot_mode': _choice(variables, 'IRONIC_BOOT_MODE',
                             ('bios', 'uefi')),
        'secure_boot': _boolean(variables, 'IRONIC_SECURE_BOOT'),
        'console_log_enabled': _boolean(variables, 'IRONIC_VM_LOG_CONSOLE'),
    }
    ironic_config = {
        'resource_class': variables['IRONIC_DEFAULT_RESOURCE_CLASS'],
        'traits': variables['IRONIC_DEFAULT_TRAITS'].split(),
    }
    data = {
        'cluster': variables['TENKS_CLUSTER'],
        'node_types': {'devstack': node_type},
        'specs': [{'type': 'devstack', 'count': count,
                   'node_name_prefix': variables['TENKS_NODE_NAME_PREFIX'],
                   'ironic_config': ironic_config}],
        'physical_networks': [physnet],
        'bridge_type': BRIDGE_TYPES[_choice(
            variables, 'IRONIC_NETWORK_SIMULATOR', BRIDGE_TYPES)],
        'bridge_prefix': variables['TENKS_BRIDGE_PREFIX'],
        'ipmi_address': variables['TENKS_BMC_ADDRESS'],
        # DevStack gives each VM the next port: as many as there are.
        'ipmi_port_range_start': start,
        'ipmi_port_range_end': start + max(count, 1) - 1,
        'redfish_port': _integer(variables, 'IRONIC_REDFISH_EMULATOR_PORT'),
        'libvirt_domain_type': _choice(variables, 'IRONIC_VM_ENGINE',
                                       ('qemu', 'kvm')),
    }
    if variables['IRONIC_VM_NETWORK_BRIDGE']:
        # The bridge DevStack's Neutron maps the physical network to.
        data['physnet_mappings'] = {
            physnet: variables['IRONIC_VM_NETWORK_BRIDGE']}
    return data, warnings


def main():
    if sys.argv[1:] == ['--variables']:
        print(' '.join(VARIABLES))
        return 0
    try:
        data, warnings = spec(os.environ)
    except Unmappable as e:
        sys.stderr.write('tenks_spec.py: %s\n' % e)
        return 1
    for warning in warnings:
        sys.stderr.write('tenks_spec.py: warning: %s\n' % warning)
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write('\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
