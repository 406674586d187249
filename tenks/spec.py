"""Cluster specs: load, validate and normalise them.

:data:`SCHEMA` describes the structure; the checks that need more than
one field at a time follow it in :func:`_check_semantics`. Every problem
is reported at once, each as ``<field path>: <what is wrong>``.
"""

import collections.abc
import copy
import difflib
import functools
import ipaddress
import logging
import posixpath
import re

import jsonschema
import yaml

from tenks import constants
from tenks import exceptions
from tenks import node_records
from tenks import units

# The standard library's logging: the CLI reads specs and the state
# database without oslo.log, which would bring oslo.config into its
# start-up (~0.15 s); the services' oslo.log set-up takes it in.
LOG = logging.getLogger(__name__)

TOP_LEVEL = '(top level)'
# What reading a spec may cost: a huge file or a YAML alias bomb must
# not take the host's memory (a spec of thousands of entries is a few
# hundred KiB and a few hundred thousand values).
MAX_SPEC_BYTES = 4 * 1024 ** 2
MAX_SPEC_VALUES = 1000000  # with YAML aliases expanded
# The Ansible-based Tenks deploys one cluster and has no name for it.
DEFAULT_CLUSTER = 'default'


def _pattern(regex, expected, **extra):
    # '\Z' rather than '$', which would accept a trailing newline.
    # x-expected says what a valid value looks like, in the error a
    # value that does not match gets (and in the spec reference).
    return {'type': 'string', 'pattern': regex + r'\Z',
            'x-expected': expected, **extra}


def _described(schema, description, **extra):
    """``schema`` with a description of the key that holds it (what the
    spec reference says about the key)."""
    return dict(schema, description=description, **extra)


def _hypervisor_option(option):
    """A key the Ansible-based Tenks reads per hypervisor, which is an
    option of each hostagent here."""
    return {'not': {}, 'x-hypervisor-option': option}


# Keys that only steer the Ansible-based Tenks (its playbooks, its
# virtualenv, its state file): accepted, warned about, then dropped.
_ANSIBLE_ONLY = {'x-ansible-only': True}


_PHYSNET_LIST = {
    'type': 'array',
    'items': {'type': 'string', 'minLength': 1},
    'uniqueItems': True,
}

_IMAGE = _pattern('^(/|https?://).+',
                  'an absolute path or an http(s):// URL')

_POOL_DEVICE = _pattern('^/dev/.+', 'a block device under /dev')

_VOLUME = {
    'type': 'object',
    'additionalProperties': False,
    # capacity: required unless existing (see _check_volumes).
    'properties': {
        'capacity': {
            'type': ['integer', 'string'], 'format': 'capacity',
            'description': 'Size of the volume, exactly (whole 512-byte '
            'sectors, no rounding); required unless existing.',
            'examples': ['10GiB']},
        # Default: qcow2, raw in a logical (LVM) pool (see _normalise).
        'format': {'enum': ['qcow2', 'raw'],
                   'description': 'Format of the volume; default: qcow2, '
                   'raw in a logical pool.'},
        'device': {'enum': ['disk', 'cdrom'],
                   'description': 'How the domain sees it; default: disk.'},
        'image': _described(_IMAGE, 'An image copied into the volume.',
                            examples=['/srv/images/cirros.qcow2']),
        'backing_image': _pattern(
            '^/.+', 'an absolute path of a file on the hypervisor (a '
            'backing file must stay readable for the life of the volume, '
            'so no URL)',
            description="The volume's backing file (copy-on-write).",
            examples=['/srv/images/base.qcow2']),
        'existing': {
            'type': 'object',
            'additionalProperties': False,
            'required': ['pool', 'volume'],
            'description': "A libvirt volume that is not Tenks', attached "
            'as it is (never changed nor removed).',
            'properties': {
                'pool': {'type': 'string', 'minLength': 1,
                         'description': 'Its libvirt storage pool.',
                         'examples': ['default']},
                'volume': {'type': 'string', 'minLength': 1,
                           'description': 'Its name in that pool.',
                           'examples': ['data.qcow2']}},
        },
    },
}

_IRONIC_DRIVER = {'enum': ['ipmi', 'redfish', 'snmp']}

_BOOT_MODE = {'enum': ['bios', 'uefi']}

_NODE_TYPE = {
    'type': 'object',
    'additionalProperties': False,
    'x-example-key': 'small',
    'required': ['memory_mb', 'vcpus'],
    'properties': {
        'memory_mb': {'type': 'integer', 'minimum': 64, 'maximum': 1048576,
                      'description': 'Memory of each node, in MiB.',
                      'examples': [2048]},
        'vcpus': {'type': 'integer', 'minimum': 1, 'maximum': 256,
                  'description': 'Virtual CPUs of each node.',
                  'examples': [2]},
        'volumes': {'type': 'array', 'items': _VOLUME, 'default': [],
                    'description': "The nodes' volumes.",
                    'examples': [[{'capacity': '10GiB'}]]},
        'physical_networks': _described(
            _PHYSNET_LIST, 'The physnets a node has a NIC on, one each.',
            default=[], examples=[['physnet1']]),
        'ironic_driver': _described(
            _IRONIC_DRIVER, "The nodes' Ironic driver, which chooses their "
            'BMC; default: default_ironic_driver.'),
        'console_log_enabled': {
            'type': 'boolean', 'default': True,
            'description': 'Whether the serial console is logged to a file '
            'on the hypervisor.'},
        'boot_mode': _described(_BOOT_MODE, 'Firmware of the nodes; '
                                'default: default_boot_mode.'),
        'secure_boot': {'type': 'boolean', 'default': False,
                        'description': "UEFI secure boot, with Microsoft's "
                        'keys enrolled (needs boot_mode uefi).'},
        # Checked against what each hypervisor's libvirt supports when
        # the nodes are scheduled (the machine_type filter).
        'cpu_mode': {
            'enum': ['host-passthrough', 'host-model', 'maximum'],
            'description': "The domains' CPU mode (libvirt's <cpu mode>); "
            "default: QEMU's own CPU model. host-passthrough needs "
            'libvirt_domain_type kvm.', 'examples': ['host-model']},
        'machine': _pattern(
            '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}',
            "a machine type of the hypervisor's QEMU",
            description="The domains' machine type: q35, pc or a versioned "
            'one (pc-q35-7.2); default: pc (q35 with secure boot).',
            examples=['q35']),
    },
}

_TRAITS = {
    'type': 'array',
    'uniqueItems': True,
    'items': {'type': 'string', 'format': 'trait'},
    'default': [],
}

_RESOURCE_CLASS = _pattern(
    '^[A-Za-z0-9_.-]{1,80}', "1 to 80 letters, digits, '_', '.' or '-'")

_IRONIC_CONFIG = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['resource_class'],
    'description': 'How the nodes are enrolled in Ironic; without it they '
    'are not enrolled.',
    'patternProperties': {
        '^[a-z]+_interface$': {
            'type': 'string', 'minLength': 1,
            'description': "An Ironic interface of the nodes: "
            'deploy_interface, boot_interface, ...',
            'x-example-key': 'deploy_interface', 'examples': ['direct']},
    },
    'properties': {
        'resource_class': _described(
            _RESOURCE_CLASS, "The nodes' resource class.",
            examples=['baremetal']),
        'traits': _described(_TRAITS, 'Traits of the nodes.',
                             examples=[['CUSTOM_GOLD']]),
        'properties': {'type': 'object', 'default': {},
                       'description': 'Ironic properties, over the cpus, '
                       'memory_mb, local_gb, cpu_arch and capabilities '
                       'Tenks sets.',
                       'examples': [{'vendor': 'tenks'}]},
        'conductor_group': {'type': 'string',
                            'description': "The nodes' Ironic conductor "
                            'group.', 'examples': ['rack1']},
        'shard': {'type': 'string', 'minLength': 1,
                  'description': "The nodes' Ironic shard.",
                  'examples': ['shard1']},
    },
}

_FLAVOR = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['resource_class', 'node_type'],
    'properties': {
        'name': {'type': 'string', 'minLength': 1, 'maxLength': 255,
                 'description': 'Name of the flavor; default: the resource '
                 'class.', 'examples': ['baremetal']},
        'resource_class': _described(
            _RESOURCE_CLASS, 'The resource class the flavor asks for, one '
            'unit.', examples=['baremetal']),
        'node_type': {'type': 'string',
                      'description': 'The node type that gives the flavor '
                      'its RAM, vCPUs and disk (its first volume).',
                      'examples': ['small']},
        'required_traits': _described(_TRAITS, 'Traits a node must have.',
                                      examples=[['CUSTOM_GOLD']]),
        'forbidden_traits': _described(_TRAITS, 'Traits a node must lack.',
                                       examples=[['CUSTOM_BRONZE']]),
        'custom_specs': {
            'type': 'object',
            'additionalProperties': {'type': ['string', 'integer',
                                              'boolean']},
            'default': {},
            'description': 'More extra specs of the flavor.',
            'examples': [{'hw:cpu_policy': 'dedicated'}],
        },
    },
}

_HOST_TRAITS = {k: v for k, v in _TRAITS.items() if k != 'default'}
_PRINTABLE = _pattern('^[ -~]*', 'printable ASCII characters')

_NODE_NAME_PREFIX = _pattern(
    '^[a-z][a-z0-9-]{0,7}',
    "a lowercase letter, then up to 7 lowercase letters, digits or '-'")
_VOL_NAME_PREFIX = _pattern(
    '^[a-z][a-z0-9_-]{0,15}',
    "a lowercase letter, then up to 15 lowercase letters, digits, '_' or "
    "'-'")
# The prefixes a specs entry takes when it names none, top-level keys of
# the Ansible-based Tenks.
SPEC_DEFAULTS = ('node_name_prefix', 'vol_name_prefix')

_SPEC = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['type', 'count'],
    'properties': {
        'type': {'type': 'string', 'description': 'A key of node_types.',
                 'examples': ['small']},
        'count': {'type': 'integer', 'minimum': 0,
                  'description': 'How many nodes of the type.',
                  'examples': [2]},
        'node_name_prefix': _described(
            _NODE_NAME_PREFIX, 'Nodes are named <prefix><lowest free '
            'index>.', default='tk'),
        'vol_name_prefix': _described(
            _VOL_NAME_PREFIX, 'Volumes are named <node><prefix><index>.',
            default='vol'),
        'ironic_config': _IRONIC_CONFIG,
        # (No defaults for the scheduler's keys: a spec without them
        # stays as it was written.)
        'required_traits': _described(
            _HOST_TRAITS, 'Traits the hypervisor of a node must have.',
            examples=[['CUSTOM_SSD']]),
        'forbidden_traits': _described(
            _HOST_TRAITS, 'Traits the hypervisor of a node must lack.',
            examples=[['CUSTOM_SLOW']]),
        'availability_zone': {
            'type': 'string', 'minLength': 1, 'pattern': '^[^:]+$',
            'description': 'The availability zone the hypervisor of a node '
            'must be in.', 'examples': ['az1']},
        'aggregate_metadata': {
            'type': 'object',
            'additionalProperties': {'type': 'string'},
            'description': 'Metadata one of the aggregates of a node\'s '
            'hypervisor must have.', 'examples': [{'rack': 'r1'}],
        },
    },
}

_PORT = {'type': 'integer', 'minimum': 1, 'maximum': 65535}

SCHEMA = {
    '$schema': 'https://json-schema.org/draft/2020-12/schema',
    'type': 'object',
    'additionalProperties': False,
    'required': ['node_types', 'specs'],
    'patternProperties': {'^ansible_': _ANSIBLE_ONLY},
    'properties': {
        'cluster': _pattern(
            '^[a-z0-9][a-z0-9-]{0,30}',
            "1 to 31 lowercase letters, digits or '-', not starting "
            "with '-'", default=DEFAULT_CLUSTER,
            description='Name of the cluster, unique in a state database.'),
        'node_types': {
            'type': 'object',
            'minProperties': 1,
            'propertyNames': _pattern(
                '^[A-Za-z0-9_.-]+', "letters, digits, '_', '.' or '-'"),
            'additionalProperties': _NODE_TYPE,
            'description': 'Kinds of node, by name.',
        },
        'specs': {'type': 'array', 'minItems': 1, 'items': _SPEC,
                  'description': 'How many nodes of which type, and how '
                  'they are named, enrolled and placed.'},
        'node_name_prefix': _described(
            _NODE_NAME_PREFIX, 'node_name_prefix of every specs entry that '
            'names none.', examples=['tk']),
        'vol_name_prefix': _described(
            _VOL_NAME_PREFIX, 'vol_name_prefix of every specs entry that '
            'names none.', examples=['vol']),
        # Default: the keys of physnet_mappings (see _normalise).
        'physical_networks': _described(
            _PHYSNET_LIST, "The cluster's physnets; default: the keys of "
            'physnet_mappings.', examples=[['physnet1']]),
        'physnet_mappings': {
            'type': 'object',
            'propertyNames': {'type': 'string', 'minLength': 1,
                              'x-expected': 'a non-empty string'},
            # Names Linux accepts (dev_valid_name): '..' would otherwise
            # pass for an existing interface (/sys/class/net/..).
            'additionalProperties': _pattern(
                r'^(?!\.\.?\Z)[^/:\s]{1,15}',
                "an interface or bridge name: 1 to 15 characters, no '/', "
                "':' or whitespace, not '.' or '..'"),
            'default': {},
            'description': 'An existing interface or bridge a physnet is '
            'linked to; an unmapped physnet gets an isolated bridge.',
            'examples': [{'physnet1': 'eth1'}],
        },
        'allow_host_uplinks': _described(
            _PHYSNET_LIST, 'Interfaces a physnet may be mapped to although '
            "they carry the hypervisor's default route, or are lo.",
            default=[], examples=[['eth0']]),
        'bridge_type': {
            # fake: simulated bridges (hostagent.drivers.fake).
            'enum': ['linuxbridge', 'openvswitch', 'fake'],
            'default': constants.DEFAULT_BRIDGE_TYPE,
            'description': "The kind of the physnets' bridges.",
        },
        'bridge_prefix': _pattern(
            '^[a-z][a-z0-9]{0,11}',
            'a lowercase letter, then up to 11 lowercase letters or digits',
            default='brtenks',
            description='Bridges are named <prefix><physnet index>.'),
        'ipmi_address': {'type': 'string', 'format': 'ip-address',
                         'default': '127.0.0.1',
                         'description': 'Where the IPMI BMCs listen: a '
                         'unicast address of the hypervisor.'},
        'ipmi_port_range_start': dict(
            _PORT, default=6230,
            description='Lowest port of the IPMI BMCs.'),
        'ipmi_port_range_end': dict(
            _PORT, default=6240,
            description='Highest port of the IPMI BMCs (inclusive).'),
        # IPMI 2.0 (lanplus) takes user names of up to 16 bytes and
        # passwords of up to 20; ipmitool and Ironic pass them as text.
        'ipmi_username': dict(_PRINTABLE, minLength=1, maxLength=16,
                              default='admin',
                              description='User name of the IPMI BMCs.'),
        'ipmi_password': dict(_PRINTABLE, minLength=1, maxLength=20,
                              default='password', **{'x-secret': True},
                              description='Password of the IPMI BMCs.'),
        'libvirt_domain_type': {
            'enum': ['qemu', 'kvm'], 'default': 'qemu',
            'description': 'qemu (TCG, emulated) or kvm (hardware '
            'virtualisation).'},
        # true: KVM, as libvirt_domain_type kvm (see _normalise).
        'libvirt_require_vt': {
            'type': 'boolean',
            'description': 'true: as libvirt_domain_type kvm (the name the '
            'Ansible-based Tenks gives it).', 'examples': [True]},
        'default_ironic_driver': _described(
            _IRONIC_DRIVER, 'ironic_driver of node types that name none.',
            default='ipmi'),
        'bmc_emulators': {
            'type': 'object',
            'additionalProperties': False,
            'patternProperties': {
                # Classic drivers: pxe_ipmitool, agent_ipmitool_socat...
                r'^[a-z]+_ipmitool(_socat)?\Z': {
                    'enum': ['virtualbmc'],
                    'description': 'A classic IPMI driver of the '
                    'Ansible-based Tenks.',
                    'x-example-key': 'pxe_ipmitool'},
                r'^[a-z]+_snmp\Z': {
                    'enum': ['virtualpdu'],
                    'description': 'A classic SNMP driver of the '
                    'Ansible-based Tenks.', 'x-example-key': 'pxe_snmp'},
            },
            'properties': {
                'ipmi': {'enum': ['virtualbmc'],
                         'description': 'The emulator of ipmi nodes.'},
                'redfish': {'enum': ['sushy-tools'],
                            'description': 'The emulator of redfish '
                            'nodes.'},
                'snmp': {'enum': ['virtualpdu'],
                         'description': 'The emulator of snmp nodes.'},
            },
            'default': {},
            'description': "Which emulator serves each Ironic driver's "
            "BMCs; the Ansible-based Tenks' defaults load unchanged.",
        },
        # Tenks' default is uefi; ours bios, quicker to boot under TCG.
        'default_boot_mode': _described(
            _BOOT_MODE, 'boot_mode of node types that name none.',
            default='bios'),
        'deploy_kernel': {
            'type': 'string', 'minLength': 1,
            'description': "The nodes' deploy kernel: a Glance image name "
            'or UUID, or an http(s):// or file:// URL.',
            'examples': ['ipa.kernel']},
        'deploy_ramdisk': {
            'type': 'string', 'minLength': 1,
            'description': "The nodes' deploy ramdisk, as deploy_kernel.",
            'examples': ['ipa.initramfs']},
        'nova_flavors': {'type': 'array', 'items': _FLAVOR, 'default': [],
                         'description': 'Nova flavors that match the '
                         'nodes.'},
        'wait_for_placement': {
            'type': 'boolean', 'default': False,
            'description': 'Whether a deploy waits until Placement has the '
            "enrolled nodes' resources."},
        'placement_timeout': {
            'type': 'integer', 'minimum': 1, 'default': 150,
            'description': 'How long that wait lasts at most, in seconds.'},
        # A hostagent's [hostagent] redfish_address and redfish_port win.
        'redfish_address': {
            'type': 'string', 'format': 'ip-address',
            'description': "Where each hypervisor's Redfish emulator of the "
            'cluster listens; default: ipmi_address.',
            'examples': ['127.0.0.1']},
        'redfish_port': dict(_PORT, default=8000,
                             description='The port of that emulator.'),
        # An htpasswd entry's user name, and a password bcrypt takes
        # whole (see _check_semantics).
        'redfish_username': _pattern(
            '^[^:\\s]{1,64}', '1 to 64 characters, no colon or whitespace',
            default='admin',
            description="User name of the Redfish emulator's basic auth."),
        'redfish_password': {
            'type': 'string', 'minLength': 1, 'default': 'password',
            'x-secret': True,
            'description': 'Its password, at most 72 bytes.'},
        'redfish_verify_ca': {
            'type': ['boolean', 'string'], 'minLength': 1, 'default': True,
            'description': "Ironic's redfish_verify_ca: true, false or a CA "
            "bundle's path on the Ironic conductor."},
        # Each hypervisor's VirtualPDU of the cluster listens on its
        # ipmi_address.
        'snmp_port': dict(_PORT, default=1161,
                          description="The UDP port of each hypervisor's "
                          'VirtualPDU of the cluster (the SNMP nodes\' '
                          'outlets); outside the IPMI port range.'),
        'snmp_community': _pattern(
            '^[\\x21-\\x7e]{1,64}', '1 to 64 printable ASCII characters, '
            'no space', default='public', **{'x-secret': True},
            description="The VirtualPDU's SNMP v1/v2c community."),
        'log_directory': _hypervisor_option('console_log_dir'),
        'libvirt_local_uri': _hypervisor_option('libvirt_uri'),
        'libvirt_pool_path': _hypervisor_option('pool_dir'),
        'libvirt_pool_type': {
            'enum': ['dir', 'logical'], 'default': 'dir',
            'description': "The cluster's pool on each hypervisor: a "
            'directory (under [hostagent] pool_dir) or an LVM volume group '
            'on libvirt_pool_devices.'},
        # A device, or {path: <device>, wipe: true} for one that Tenks
        # may wipe although it holds data (see _check_pool_devices).
        'libvirt_pool_devices': {
            'type': 'array', 'uniqueItems': True,
            'items': dict(
                _POOL_DEVICE, type=['string', 'object'],
                required=['path'], additionalProperties=False,
                properties={
                    'path': _described(_POOL_DEVICE, 'The device.',
                                       examples=['/dev/sdc']),
                    'wipe': {'type': 'boolean',
                             'description': 'true: Tenks may wipe the '
                             'device although it holds data.',
                             'examples': [True]}}),
            'default': [],
            'description': 'Block devices of a logical pool: a path, or '
            '{path, wipe}.',
            'examples': [['/dev/sdb', {'path': '/dev/sdc', 'wipe': True}]]},
        'cmd': _ANSIBLE_ONLY,
        'virtualenv_path': _ANSIBLE_ONLY,
        'python_upper_constraints_url': _ANSIBLE_ONLY,
        'system_requirements': _ANSIBLE_ONLY,
        'allocations_file_path': _ANSIBLE_ONLY,
        'state_file_path': _ANSIBLE_ONLY,
    },
}

_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks('capacity', raises=ValueError)
def _is_capacity(value):
    # Values of the wrong type get a type error instead.
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        units.parse_capacity(value)
    return True


@_FORMATS.checks('ip-address', raises=ValueError)
def _is_ip_address(value):
    if isinstance(value, str):
        ipaddress.ip_address(value)
    return True


@functools.cache
def _standard_traits():
    # Read when a spec names a trait that is not CUSTOM_: os-traits
    # takes longer to import than the rest of a spec's validation.
    import os_traits
    return frozenset(os_traits.get_traits())


@_FORMATS.checks('trait', raises=ValueError)
def _is_trait(value):
    if isinstance(value, str) and not (
            re.fullmatch('CUSTOM_[A-Z0-9_]{1,248}', value)
            or value in _standard_traits()):
        raise ValueError(
            '%r is neither a standard trait (os-traits) nor CUSTOM_ '
            'followed by upper-case letters, digits and _' % value)
    return True


def _is_int(value):
    # Not bool, and not a float with nothing after the point either.
    return isinstance(value, int) and not isinstance(value, bool)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        'integer', lambda checker, instance: _is_int(instance)))
_VALIDATOR = _Validator(SCHEMA, format_checker=_FORMATS)


class _Loader(getattr(yaml, 'CSafeLoader', yaml.SafeLoader)):
    """The safe loader (libyaml's parser where PyYAML has it: three
    times faster on a big spec), but a key repeated in a mapping is an
    error."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == 'tag:yaml.org,2002:merge':
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, collections.abc.Hashable):
                continue  # the base class reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, 'duplicate key %r' % (key,),
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load(path):
    """Read the YAML spec at ``path``; return it validated and
    normalised, or raise SpecError listing every problem.
    """
    try:
        with open(path, 'rb') as f:
            text = f.read(MAX_SPEC_BYTES + 1)
        if len(text) > MAX_SPEC_BYTES:
            raise exceptions.SpecError(source=path, problems=[
                'the file is larger than %d MiB, more than any cluster '
                'spec needs' % (MAX_SPEC_BYTES // 1024 ** 2)])
        data = yaml.load(text.decode('utf-8'), Loader=_Loader)
    except OSError as exc:
        raise exceptions.SpecError(source=path, problems=[
            'cannot read the file: %s' % (exc.strerror or exc)]) from exc
    except UnicodeDecodeError as exc:
        raise exceptions.SpecError(source=path, problems=[
            'cannot read the file: not UTF-8 text (%s)' % exc]) from exc
    except yaml.YAMLError as exc:
        raise exceptions.SpecError(
            source=path, problems=[_yaml_problem(exc)]) from exc
    return validate(data, source=path)


def _yaml_problem(exc):
    mark = getattr(exc, 'problem_mark', None)
    if mark is None:
        return 'invalid YAML: %s' % exc
    return 'invalid YAML at line %d, column %d: %s' % (
        mark.line + 1, mark.column + 1, exc.problem or exc.context)


def validate(data, source='<spec>'):
    """Validate already parsed ``data``; return a normalised copy with
    every default filled in and capacities in bytes, or raise SpecError
    listing every problem.
    """
    where = _beyond_bound(data)
    if where is not None:
        raise exceptions.SpecError(source=source, problems=[
            '%s: the spec holds more than %d values with its YAML aliases '
            'expanded, more than any cluster spec needs'
            % (_path(where), MAX_SPEC_VALUES)])
    errors = sorted(_VALIDATOR.iter_errors(data),
                    key=lambda e: _position(data, e.absolute_path))
    problems = [p for error in errors for p in _describe(error)]
    if isinstance(data, dict):
        ignored = [key for key in data if _ansible_only(key)]
        if ignored:
            LOG.warning('%s: ignored: %s (they only steer the '
                        'Ansible-based Tenks)', source, ', '.join(ignored))
        if data.get('libvirt_require_vt') is True and data.get(
                'libvirt_domain_type') == 'qemu':
            problems.append('libvirt_require_vt: true asks for KVM, but '
                            'libvirt_domain_type is qemu')
        spec = _normalise(data)
        problems += _check_semantics(spec, 'physical_networks' in data)
    if problems:
        raise exceptions.SpecError(
            source=source, problems=list(dict.fromkeys(problems)))
    for node_type in spec['node_types'].values():
        for volume in node_type['volumes']:
            if 'capacity' in volume:
                volume['capacity'] = units.parse_capacity(
                    volume['capacity'])
    return spec


def _beyond_bound(data):
    """The path of the value at which ``data``, walked with every
    reference to a shared value (a YAML alias) counted again, holds
    more than MAX_SPEC_VALUES values; None when it holds fewer."""
    count = 0
    stack = [((), data)]
    while stack:
        path, value = stack.pop()
        count += 1
        if count > MAX_SPEC_VALUES:
            return path
        if isinstance(value, dict):
            stack += [(path + (key,), item) for key, item in value.items()]
        elif isinstance(value, list):
            stack += [(path + (index,), item)
                      for index, item in enumerate(value)]
    return None


def _ansible_only(key):
    schema = SCHEMA['properties'].get(key)
    if schema is None:
        schema = next((sub for pattern, sub in
                       SCHEMA['patternProperties'].items()
                       if isinstance(key, str) and re.search(pattern, key)),
                      None)
    return schema is _ANSIBLE_ONLY


def _position(data, path):
    """Where ``path`` lies in ``data``, for sorting in document order."""
    position = []
    for key in path:
        position.append(list(data).index(key) if isinstance(data, dict)
                        else key)
        data = data[key]
    return position


def _path(keys):
    text = ''
    for key in keys:
        if isinstance(key, int):
            text += '[%d]' % key
        else:
            text += ('.%s' if text else '%s') % key
    return text or TOP_LEVEL


_TYPE_NAMES = {'integer': 'an integer', 'string': 'a string',
               'object': 'a mapping', 'array': 'a list',
               'boolean': 'true or false'}


def _show(value, secret=False):
    """``value`` in a problem; a secret's only by its kind."""
    if value is None:
        return 'no value'
    if isinstance(value, dict):
        return 'a mapping'
    if isinstance(value, list):
        return 'a list'
    if secret:
        return 'true or false' if isinstance(value, bool) else 'a number'
    return repr(value)


def _describe(error):
    """Turn a jsonschema error into problems in plain words."""
    kind, value, schema = error.validator, error.instance, error.schema
    where = _path(error.absolute_path)
    if list(error.schema_path)[-2:-1] == ['propertyNames']:
        return ['%s: invalid key %r: expected %s'
                % (where, value, schema['x-expected'])]
    if kind == 'additionalProperties':
        known = schema.get('properties', {})
        patterns = schema.get('patternProperties', {})
        return ['%s: unknown key %r%s' % (where, key, _suggest(key, known))
                for key in value if key not in known and not any(
                    re.search(p, str(key)) for p in patterns)]
    if kind == 'required':
        return ['%s: missing required key %r' % (where, key)
                for key in error.validator_value if key not in value]
    if kind == 'type':
        expected = error.validator_value
        if isinstance(expected, str):
            expected = [expected]
        problem = 'expected %s, got %s' % (
            ' or '.join(_TYPE_NAMES[name] for name in expected),
            _show(value, schema.get('x-secret', False)))
        if expected == ['string'] and isinstance(value, (int, float)):
            problem += ' (put it in quotes)'
    elif kind == 'not' and 'x-hypervisor-option' in schema:
        problem = ('set per hypervisor here, as [hostagent] %s in the '
                   'configuration of its hostagent, not in the spec'
                   % schema['x-hypervisor-option'])
    elif kind == 'enum':
        if value in schema.get('x-not-supported-yet', ()):
            problem = '%s is not supported yet (supported: %s)' % (
                _literal(value), ', '.join(map(str, error.validator_value)))
        else:
            problem = '%s is not one of: %s' % (
                _show(value), ', '.join(map(str, error.validator_value)))
    elif kind == 'pattern' and schema.get('x-secret'):
        problem = 'is invalid: expected %s' % schema['x-expected']
    elif kind == 'pattern':
        problem = '%r is invalid: expected %s' % (
            value, schema['x-expected'])
    elif kind in ('minLength', 'minItems', 'minProperties'):
        problem = 'must not be empty'
    elif kind == 'maxLength':
        problem = 'is longer than %d characters' % error.validator_value
    elif kind == 'uniqueItems':
        repeated = [item for i, item in enumerate(value)
                    if item in value[:i]]
        problem = 'listed more than once: %s' % ', '.join(
            map(repr, repeated))
    elif kind == 'format':
        problem = str(error.cause)
    else:
        problem = error.message
    return ['%s: %s' % (where, problem)]


def _literal(value):
    """``value`` as YAML writes it: true, false, 'text', 12."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _suggest(key, known):
    close = difflib.get_close_matches(str(key), list(known), n=1)
    return ' (did you mean %r?)' % close[0] if close else ''


def _normalise(data):
    """A copy of ``data`` with every default filled in, and the keys of
    the Ansible-based Tenks that only steer Ansible left out."""
    spec = {key: copy.deepcopy(value) for key, value in data.items()
            if not _ansible_only(key)}
    defaults = {key: spec.pop(key) for key in SPEC_DEFAULTS if key in spec}
    if isinstance(spec.get('specs'), list):
        for entry in spec['specs']:
            if isinstance(entry, dict):
                for key, value in defaults.items():
                    entry.setdefault(key, value)
    if spec.pop('libvirt_require_vt', None) is True:
        spec.setdefault('libvirt_domain_type', 'kvm')
    _fill_defaults(spec, SCHEMA)
    fmt = 'raw' if spec['libvirt_pool_type'] == 'logical' else 'qcow2'
    for volume in _volumes(spec):
        if 'existing' not in volume:
            volume.setdefault('format', fmt)
    spec.setdefault('redfish_address', spec['ipmi_address'])
    mappings = spec['physnet_mappings']
    spec.setdefault('physical_networks',
                    list(mappings) if isinstance(mappings, dict) else [])
    node_types = spec.get('node_types')
    for node_type in (node_types.values() if isinstance(node_types, dict)
                      else ()):
        if isinstance(node_type, dict):
            node_type.setdefault('boot_mode', spec['default_boot_mode'])
    return spec


def _fill_defaults(instance, schema):
    if isinstance(instance, dict):
        properties = schema.get('properties', {})
        for key, subschema in properties.items():
            if key not in instance and 'default' in subschema:
                instance[key] = copy.deepcopy(subschema['default'])
        for key, value in instance.items():
            subschema = properties.get(
                key, schema.get('additionalProperties'))
            if isinstance(subschema, dict):
                _fill_defaults(value, subschema)
    elif isinstance(instance, list) and 'items' in schema:
        for item in instance:
            _fill_defaults(item, schema['items'])


def _volumes(spec, paths=False):
    """The volumes (mappings) of ``spec``'s node types, with their
    field paths if ``paths``; what has the wrong type is skipped."""
    node_types = spec.get('node_types')
    for type_name, node_type in (node_types.items()
                                 if isinstance(node_types, dict) else ()):
        volumes = isinstance(node_type, dict) and node_type.get('volumes')
        for i, volume in enumerate(volumes
                                   if isinstance(volumes, list) else ()):
            if isinstance(volume, dict):
                yield ((volume, ['node_types', type_name, 'volumes', i])
                       if paths else volume)


# LVM allocates in extents of 4 MiB (vgcreate's default, which libvirt
# uses): a logical volume of another size would be rounded up.
LVM_EXTENT = 4 * 1024 ** 2


def _check_volumes(spec):
    """Problems of volume kinds: what goes together, what the pool
    type allows, an existing volume attached to one node at most."""
    problems = []
    logical = spec.get('libvirt_pool_type') == 'logical'
    devices = spec.get('libvirt_pool_devices')
    if logical and not devices:
        problems.append('libvirt_pool_devices: libvirt_pool_type logical '
                        'needs the block devices of its volume group')
    if devices and spec.get('libvirt_pool_type') == 'dir':
        problems.append('libvirt_pool_devices: only for libvirt_pool_type '
                        'logical (the pool type is dir)')
    problems += _check_pool_devices(devices)
    for volume, path in _volumes(spec, paths=True):
        where = _path(path)
        if 'existing' in volume:
            given = [k for k in ('capacity', 'format', 'image',
                                 'backing_image') if k in volume]
            if given:
                problems.append(
                    '%s: %s cannot go with existing: an existing volume '
                    'is attached as it is' % (where, ', '.join(given)))
            continue
        if 'capacity' not in volume:
            problems.append("%s: missing required key 'capacity'" % where)
        if 'image' in volume and 'backing_image' in volume:
            problems.append('%s: give image (a copy) or backing_image '
                            '(copy-on-write), not both' % where)
        if 'backing_image' in volume and volume.get('format') == 'raw' \
                and not logical:
            problems.append('%s.format: a volume with a backing_image is '
                            'qcow2, not raw' % where)
        if not logical:
            continue
        if volume.get('format') == 'qcow2':
            problems.append('%s.format: a logical (LVM) pool holds raw '
                            'volumes only' % where)
        if 'backing_image' in volume:
            problems.append('%s.backing_image: a logical (LVM) pool has no '
                            'copy-on-write volumes: use image (a copy)'
                            % where)
        try:
            size = units.parse_capacity(volume.get('capacity'))
        except ValueError:
            continue  # reported by the schema
        if size % LVM_EXTENT:
            problems.append(
                '%s.capacity: %d bytes is not a multiple of the 4 MiB '
                'extents of a logical (LVM) pool, and a volume gets exactly '
                'its capacity: use e.g. %d bytes' % (
                    where, size, -(-size // LVM_EXTENT) * LVM_EXTENT))
    problems += _existing_shared(spec)
    return problems


def pool_devices(spec):
    """[(path, wipe)] of the spec's libvirt_pool_devices."""
    return [(entry, False) if isinstance(entry, str)
            else (entry['path'], entry.get('wipe', False))
            for entry in spec['libvirt_pool_devices']]


def _check_pool_devices(devices):
    """A device path that leaves /dev or is not plain (the hypervisor
    resolves its symbolic links), or one listed twice."""
    problems = []
    seen = set()
    for i, entry in enumerate(devices if isinstance(devices, list) else ()):
        path = entry.get('path') if isinstance(entry, dict) else entry
        if not isinstance(path, str) or not path.startswith('/dev/'):
            continue  # reported by the schema
        where = 'libvirt_pool_devices[%d]' % i
        if posixpath.normpath(path) != path:
            problems.append('%s: %r is not a plain path under /dev (no '
                            '"..", "." or "//")' % (where, path))
        elif path in seen:
            problems.append('%s: %s is listed more than once' % (where,
                                                                 path))
        seen.add(path)
    return problems


def _existing_shared(spec):
    """An existing volume that more than one node would get."""
    specs = spec.get('specs')
    counts = {}
    for entry in specs if isinstance(specs, list) else ():
        if isinstance(entry, dict) and _is_int(entry.get('count')) and (
                isinstance(entry.get('type'), str)):
            counts[entry.get('type')] = counts.get(
                entry.get('type'), 0) + entry['count']
    users = {}
    for volume, path in _volumes(spec, paths=True):
        existing = volume.get('existing')
        if isinstance(existing, dict):
            key = (existing.get('pool'), existing.get('volume'))
            if all(isinstance(part, str) for part in key):
                users.setdefault(key, []).append(path)
    problems = []
    for (pool, name), paths in users.items():
        nodes = sum(counts.get(path[1], 0) for path in paths)
        if nodes > 1:
            problems.append(
                '%s.existing: volume %s of pool %s would be attached to %d '
                'nodes; an existing volume serves one node (count 1)' % (
                    _path(paths[0]), name, pool, nodes))
    return problems


def _check_semantics(spec, physnets_explicit):
    """Problems the schema cannot see. ``spec`` may be invalid: skip
    what has the wrong type, the schema reported it already.
    """
    problems = []
    node_types = spec.get('node_types')
    if not isinstance(node_types, dict):
        node_types = None
    specs = spec.get('specs')
    specs = [s if isinstance(s, dict) else {}
             for s in (specs if isinstance(specs, list) else [])]

    def check_node_type(path, name):
        if node_types is not None and isinstance(name, str) and (
                name not in node_types):
            problems.append(
                '%s: unknown node type %r (node_types declares: %s)'
                % (_path(path), name,
                   ', '.join(map(str, node_types)) or 'none'))

    for i, node_spec in enumerate(specs):
        check_node_type(['specs', i, 'type'], node_spec.get('type'))

    for type_name, node_type in (node_types or {}).items():
        if isinstance(node_type, dict):
            problems += _firmware_problems(spec, type_name, node_type)

    # A node type's physnet the spec does not declare is one the
    # hostagents map ([hostagent] physnet_mappings), as the Ansible-based
    # Tenks' per-host variables do: the deploy checks that one does.
    declared = spec['physical_networks']
    mappings = spec['physnet_mappings']
    if (physnets_explicit and isinstance(declared, list)
            and isinstance(mappings, dict)):
        known = 'physical_networks declares: %s' % (
            ', '.join(map(str, declared)) or 'none')
        for physnet in mappings:
            if physnet not in declared:
                problems.append(
                    '%s: physical network %r is not declared (%s)'
                    % (_path(['physnet_mappings', physnet]), physnet,
                       known))

    flavors = spec.get('nova_flavors')
    classes = {s['ironic_config']['resource_class'] for s in specs
               if isinstance(s.get('ironic_config'), dict)
               and isinstance(s['ironic_config'].get('resource_class'), str)}
    for i, flavor in enumerate(flavors if isinstance(flavors, list) else []):
        if not isinstance(flavor, dict):
            continue
        check_node_type(['nova_flavors', i, 'node_type'],
                        flavor.get('node_type'))
        rc = flavor.get('resource_class')
        if isinstance(rc, str) and rc not in classes:
            problems.append(
                '%s: no spec enrols nodes of resource class %r (the '
                'specs\' ironic_config have: %s)'
                % (_path(['nova_flavors', i, 'resource_class']), rc,
                   ', '.join(sorted(classes)) or 'none'))

    problems += _volume_name_clashes(specs, node_types or {})
    problems += _check_volumes(spec)

    for field in ('ipmi_address', 'redfish_address'):
        why = _not_unicast(spec.get(field))
        if why and not (field == 'redfish_address' and spec[field] == spec[
                'ipmi_address']):  # its default: said once
            problems.append(
                '%s: %s is %s; BMCs listen on one address of the '
                'hypervisor, which Ironic dials' % (field, spec[field], why))

    password = spec.get('redfish_password')
    if isinstance(password, str) and len(password.encode()) > 72:
        problems.append('redfish_password: is longer than 72 bytes (the '
                        'emulator keeps a bcrypt hash of it)')

    start = spec['ipmi_port_range_start']
    end = spec['ipmi_port_range_end']
    snmp_port = spec['snmp_port']
    if (all(map(_is_int, (start, end, snmp_port))) and start <= snmp_port
            <= end and any(_bmc_type(spec, name) == 'snmp'
                           for name in node_types or {})):
        problems.append(
            'snmp_port: %d is in the IPMI port range %d-%d (both are UDP '
            'ports of the BMC address)' % (snmp_port, start, end))
    # The range is each BMC address's (each hypervisor's ipmi_address):
    # how many nodes it holds depends on where they go, which only the
    # scheduler knows.
    if _is_int(start) and _is_int(end) and end < start:
        problems.append(
            'ipmi_port_range_end: %d is less than '
            'ipmi_port_range_start (%d)' % (end, start))
    return problems


def _not_unicast(value):
    """Why IP address ``value`` cannot be one host's address, or None
    (also when it is no address: the schema says so)."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if address.is_unspecified:
        return 'the unspecified address (every address of the host)'
    if address.is_multicast:
        return 'a multicast address'
    if address == ipaddress.IPv4Address('255.255.255.255'):
        return 'the broadcast address'
    if address.version == 4 and address.is_reserved:
        return 'a reserved address'  # 240.0.0.0/4
    return None


def _firmware_problems(spec, type_name, node_type):
    """Secure boot without UEFI; a Redfish node without a disk or a
    NIC, whose boot device sushy-tools cannot set (it marks a disk or
    an interface of the domain bootable; virtualbmc sets <os><boot>,
    which needs neither)."""
    problems = []
    where = ['node_types', type_name]
    if node_type.get('secure_boot') is True and node_type.get(
            'boot_mode') == 'bios':
        problems.append('%s: secure boot needs boot_mode uefi (the node '
                        'type\'s boot mode is bios)'
                        % _path(where + ['secure_boot']))
    machine = node_type.get('machine')
    if node_type.get('secure_boot') is True and isinstance(
            machine, str) and 'q35' not in machine:
        problems.append('%s: %s cannot have secure boot, which needs SMM: '
                        'libvirt allows it on q35 machines only'
                        % (_path(where + ['machine']), machine))
    driver = node_type.get('ironic_driver', spec.get('default_ironic_driver'))
    if driver == 'redfish' and _bmc_type(spec, type_name) == 'redfish':
        for key, what in (('volumes', 'a volume'),
                          ('physical_networks', 'a physical network')):
            if node_type.get(key) == []:
                problems.append(
                    '%s: a Redfish node needs %s: its BMC sets the boot '
                    'device on a disk or NIC of the domain'
                    % (_path(where + [key]), what))
    return problems


def _bmc_type(spec, type_name):
    """node_records.bmc_type of a spec that may be invalid: 'ipmi' where
    it cannot tell (the schema reports the problem)."""
    try:
        return node_records.bmc_type(spec, type_name)
    except (KeyError, TypeError, AttributeError):
        return 'ipmi'


def _volume_name_clashes(specs, node_types):
    """Problems where two volumes of the cluster could get one name.

    A volume is named <node prefix><node index><vol prefix><volume
    index> (tenks.names). Node names are unique (the scheduler never
    gives one name twice), and a fresh cluster's node indices all lie
    below N, the cluster's total count: the scheduler takes the lowest
    free index of a prefix, and when it names its m-th node (m < N) at
    most m names are taken, so one of the indices 0..m is free. So every
    name the cluster can get is made from an index below N and a volume
    index below its node type's volume count, and checking those, for
    every pair of specs (a spec with itself included), finds every
    clash. (Indices beyond N arise only from nodes recorded for other
    clusters: the scheduler guards against those.) A name of spec i is
    checked against spec j by parsing it: prefix, index, vol prefix,
    volume index; the same node name from both sides is the same node.
    """
    entries = []
    for node_spec in specs:
        type_name = node_spec.get('type')
        node_type = isinstance(type_name, str) and node_types.get(type_name)
        prefixes = (node_spec.get('node_name_prefix'),
                    node_spec.get('vol_name_prefix'))
        volumes = isinstance(node_type, dict) and node_type.get('volumes')
        if not all(isinstance(p, str) for p in prefixes) or not (
                isinstance(volumes, list) and volumes):
            entries.append(None)  # nothing to name, or reported already
            continue
        entries.append((*prefixes, len(volumes)))
    total = sum(s['count'] for s in specs
                if _is_int(s.get('count')) and s['count'] > 0)
    # Entries alike clash alike: each is checked once, as its first
    # entry. Names of two entries can meet only when one node prefix
    # starts the other (an equal one gives equal names from one node),
    # so each is checked against the entries whose node prefix is one
    # of its own prefix's (at most 7) shorter beginnings: linear in the
    # number of entries.
    first_of = {}
    for index, entry in enumerate(entries):
        if entry is not None:
            first_of.setdefault(entry, index)
    by_node_prefix = {}
    for entry in first_of:
        by_node_prefix.setdefault(entry[0], []).append(entry)
    clashes = []
    for entry, index in first_of.items():
        for length in range(1, len(entry[0])):
            for other in by_node_prefix.get(entry[0][:length], ()):
                (i, first), (j, second) = sorted(
                    [(index, entry), (first_of[other], other)])
                clash = _first_clash(first, second, total)
                if clash is not None:
                    clashes.append((j, i, first, second, clash))
    problems = []
    for j, i, first, second, (node, volume, other) in sorted(clashes):
        problems.append(
            'specs[%d].vol_name_prefix: volume %s of node %s '
            '(node_name_prefix %r, vol_name_prefix %r) has the '
            'name of a volume of node %s of specs[%d] '
            '(node_name_prefix %r, vol_name_prefix %r): change '
            'one of the prefixes' % (
                j, volume, other, second[0], second[1], node, i,
                first[0], first[1]))
    return problems


def _first_clash(first, second, total):
    """(node of ``first``, volume name, node of ``second``) sharing a
    volume name, or None; each is (node prefix, vol prefix, volumes).

    Names are <node prefix><index><vol prefix><volume index>, indices
    below ``total`` and the volume counts, written without leading
    zeros; a vol prefix starts with a letter, so an index is the run of
    digits after its prefix. Two different nodes can share a name only
    when a node prefix is the other's followed by an extension of
    digits D then a non-digit rest R: the shorter's node is <prefix>D,
    and its volume's tail (<vol prefix><volume index>) is R<index of
    the longer's node><the longer's vol prefix><volume index>. That is
    checked for each volume of the shorter: no walk over the indices.
    """
    if first[0] == second[0] or not (first[0].startswith(second[0])
                                     or second[0].startswith(first[0])):
        return None  # one prefix: equal names come from one node
    short, long_ = sorted((first, second), key=lambda e: len(e[0]))
    extension = long_[0][len(short[0]):]
    digits = len(extension) - len(extension.lstrip(_DIGITS))
    index, rest = extension[:digits], extension[digits:]
    if not rest or not _is_index(index, total):
        return None  # all digits: the longer's node is the shorter's
    found = []
    for vol_index in range(short[2]):
        tail = '%s%d' % (short[1], vol_index)
        if not tail.startswith(rest):
            continue
        after = tail[len(rest):]
        digits = len(after) - len(after.lstrip(_DIGITS))
        other, vol = after[:digits], after[digits:]
        if _is_index(other, total) and vol.startswith(long_[1]) and (
                _is_index(vol[len(long_[1]):], long_[2])):
            nodes = (short[0] + index, long_[0] + other)
            name = nodes[0] + tail
            # Ordered as ``first`` names its volumes: index, then volume.
            if first is short:
                found.append(((0, vol_index), nodes[0], name, nodes[1]))
            else:
                found.append(((int(other), int(vol[len(long_[1]):])),
                              nodes[1], name, nodes[0]))
    return min(found)[1:] if found else None


_DIGITS = '0123456789'


def _is_index(text, limit):
    """Whether ``text`` writes an index below ``limit``, as names do."""
    return text.isdigit() and text == str(int(text)) and int(text) < limit
