import copy
import json

import jsonschema
import pytest
import yaml

from tenks import exceptions
from tenks import node_records
from tenks import spec

GiB = 1024 ** 3


def minimal():
    return {
        'cluster': 'quickstart',
        'node_types': {'small': {'memory_mb': 256, 'vcpus': 1}},
        'specs': [{'type': 'small', 'count': 2}],
    }


def write(tmp_path, data):
    path = tmp_path / 'spec.yaml'
    text = data if isinstance(data, str) else yaml.safe_dump(
        data, sort_keys=False)
    path.write_text(text)
    return path


def problems(tmp_path, data):
    """Load ``data`` from a file; return the SpecError's problems."""
    path = write(tmp_path, data)
    with pytest.raises(exceptions.SpecError) as info:
        spec.load(path)
    assert info.value.source == path
    assert str(path) in str(info.value)
    for problem in info.value.problems:
        assert problem in str(info.value)
    return info.value.problems


def change(**changes):
    """The minimal spec, with a value set at each dotted path."""
    data = minimal()
    for dotted, value in changes.items():
        *parents, last = [int(k) if k.isdigit() else k
                          for k in dotted.split('__')]
        target = data
        for key in parents:
            target = target[key]
        target[last] = value
    return data


def test_schema_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(spec.SCHEMA)


def test_defaults_are_filled_in(tmp_path):
    loaded = spec.load(write(tmp_path, minimal()))
    assert loaded == {
        'cluster': 'quickstart',
        'node_types': {'small': {'memory_mb': 256, 'vcpus': 1,
                                 'volumes': [], 'physical_networks': [],
                                 'console_log_enabled': True,
                                 'boot_mode': 'bios', 'secure_boot': False}},
        'specs': [{'type': 'small', 'count': 2, 'node_name_prefix': 'tk',
                   'vol_name_prefix': 'vol'}],
        'physical_networks': [],
        'physnet_mappings': {},
        'allow_host_uplinks': [],
        'bridge_type': 'linuxbridge',
        'bridge_prefix': 'brtenks',
        'ipmi_address': '127.0.0.1',
        'ipmi_port_range_start': 6230,
        'ipmi_port_range_end': 6240,
        'ipmi_username': 'admin',
        'ipmi_password': 'password',
        'libvirt_domain_type': 'qemu',
        'libvirt_pool_type': 'dir',
        'libvirt_pool_devices': [],
        'default_ironic_driver': 'ipmi',
        'bmc_emulators': {},
        'default_boot_mode': 'bios',
        'nova_flavors': [],
        'wait_for_placement': False,
        'placement_timeout': 150,
        'redfish_address': '127.0.0.1',
        'redfish_port': 8000,
        'redfish_username': 'admin',
        'redfish_password': 'password',
        'redfish_verify_ca': True,
        'snmp_port': 1161,
        'snmp_community': 'public',
    }


FULL = """\
cluster: quickstart
node_types:
  small:
    memory_mb: 256
    vcpus: 1
    volumes:
      - capacity: 1GiB
      - capacity: 2 GB
        format: raw
      - capacity: 1048576
    physical_networks: [physnet2, physnet1]
specs:
  - type: small
    count: 2
    node_name_prefix: tk
    vol_name_prefix: vol
  - type: small
    count: 0
    node_name_prefix: tk
physical_networks: [physnet1, physnet2]
physnet_mappings:
  physnet1: eth1
  physnet2: breth2
bridge_type: linuxbridge
bridge_prefix: br
ipmi_address: "::1"
ipmi_port_range_start: 7000
ipmi_port_range_end: 7001
ipmi_username: root
ipmi_password: secret
libvirt_domain_type: kvm
"""


def test_full_spec(tmp_path):
    loaded = spec.load(write(tmp_path, FULL))
    assert loaded['node_types']['small']['volumes'] == [
        {'capacity': GiB, 'format': 'qcow2'},
        {'capacity': 2 * 1000 ** 3, 'format': 'raw'},
        {'capacity': 1048576, 'format': 'qcow2'},
    ]
    assert loaded['specs'][1] == {'type': 'small', 'count': 0,
                                  'node_name_prefix': 'tk',
                                  'vol_name_prefix': 'vol'}
    assert loaded['physical_networks'] == ['physnet1', 'physnet2']
    assert loaded['ipmi_address'] == '::1'
    assert loaded['ipmi_port_range_end'] == 7001
    assert loaded['libvirt_domain_type'] == 'kvm'


def test_physical_networks_default_to_mapping_keys_in_order():
    data = change(physnet_mappings={'b': 'eth2', 'a': 'eth1'})
    data['node_types']['small']['physical_networks'] = ['a']
    assert spec.validate(data)['physical_networks'] == ['b', 'a']


def test_normalised_spec_is_json_and_validates_to_itself(tmp_path):
    loaded = spec.load(write(tmp_path, FULL))
    assert json.loads(json.dumps(loaded)) == loaded
    again = spec.validate(copy.deepcopy(loaded))
    assert again == loaded
    mapped_only = spec.validate(change(physnet_mappings={'p': 'eth1'}))
    assert spec.validate(mapped_only) == mapped_only


def test_validate_does_not_change_its_input():
    data = change(node_types__small__volumes=[{'capacity': '1GiB'}])
    before = copy.deepcopy(data)
    spec.validate(data)
    assert data == before


def test_validate_names_its_source():
    with pytest.raises(exceptions.SpecError) as info:
        spec.validate(change(specs__0__count=-1), source='rpc:deploy')
    assert str(info.value).startswith('rpc:deploy: invalid cluster spec')
    with pytest.raises(exceptions.SpecError) as info:
        spec.validate(change(specs__0__count=-1))
    assert info.value.source == '<spec>'


def test_unknown_top_level_key(tmp_path):
    data = change(ipmi_pasword='x', extra=1)
    assert problems(tmp_path, data) == [
        "(top level): unknown key 'ipmi_pasword' "
        "(did you mean 'ipmi_password'?)",
        "(top level): unknown key 'extra'",
    ]


def test_unknown_nested_keys(tmp_path):
    data = minimal()
    del data['node_types']['small']['memory_mb']
    data['node_types']['small']['memroy_mb'] = 256
    data['node_types']['small']['volumes'] = [{'capacity': 512, 'sise': 1}]
    data['specs'][0]['ironic_cfg'] = {}
    assert problems(tmp_path, data) == [
        "node_types.small: unknown key 'memroy_mb' "
        "(did you mean 'memory_mb'?)",
        "node_types.small: missing required key 'memory_mb'",
        "node_types.small.volumes[0]: unknown key 'sise'",
        "specs[0]: unknown key 'ironic_cfg' (did you mean 'ironic_config'?)",
    ]


def test_ironic_config_and_flavors(tmp_path):
    data = minimal()
    data['specs'][0]['ironic_config'] = {
        'resource_class': 'gold', 'traits': ['CUSTOM_FAST', 'HW_CPU_X86_AVX2'],
        'deploy_interface': 'direct', 'properties': {'cpu_arch': 'x86_64'}}
    data['nova_flavors'] = [{'resource_class': 'gold', 'node_type': 'small',
                             'required_traits': ['CUSTOM_FAST']}]
    result = spec.validate(data)
    assert result['specs'][0]['ironic_config']['deploy_interface'] == (
        'direct')
    assert result['nova_flavors'][0]['forbidden_traits'] == []
    assert result['nova_flavors'][0]['custom_specs'] == {}


def test_bad_traits_resource_classes_and_flavors(tmp_path):
    data = minimal()
    data['specs'][0]['ironic_config'] = {
        'resource_class': 'gold rush', 'traits': ['fast', 'CUSTOM_OK'],
        'flux_interface': 7}
    data['nova_flavors'] = [
        {'resource_class': 'silver', 'node_type': 'huge',
         'forbidden_traits': ['CUSTOM_bad']}]
    assert problems(tmp_path, data) == [
        "specs[0].ironic_config.resource_class: 'gold rush' is invalid: "
        "expected 1 to 80 letters, digits, '_', '.' or '-'",
        "specs[0].ironic_config.traits[0]: 'fast' is neither a standard "
        "trait (os-traits) nor CUSTOM_ followed by upper-case letters, "
        "digits and _",
        'specs[0].ironic_config.flux_interface: expected a string, got 7 '
        '(put it in quotes)',
        "nova_flavors[0].forbidden_traits[0]: 'CUSTOM_bad' is neither a "
        "standard trait (os-traits) nor CUSTOM_ followed by upper-case "
        "letters, digits and _",
        "nova_flavors[0].node_type: unknown node type 'huge' (node_types "
        "declares: small)",
        "nova_flavors[0].resource_class: no spec enrols nodes of resource "
        "class 'silver' (the specs' ironic_config have: gold rush)",
    ]


@pytest.mark.parametrize('field, value, problem', [
    ('specs__0__count', 'two',
     "specs[0].count: expected an integer, got 'two'"),
    ('specs__0__count', True, 'specs[0].count: expected an integer, got True'),
    ('specs__0__count', 2.0, 'specs[0].count: expected an integer, got 2.0'),
    ('specs__0__count', None,
     'specs[0].count: expected an integer, got no value'),
    ('specs', {'type': 'small'}, 'specs: expected a list, got a mapping'),
    ('node_types', ['small'], 'node_types: expected a mapping, got a list'),
    # A password is never echoed back, whatever its type.
    ('ipmi_password', 1234,
     'ipmi_password: expected a string, got a number (put it in quotes)'),
    ('redfish_password', 20261201,
     'redfish_password: expected a string, got a number (put it in '
     'quotes)'),
    ('redfish_password', True,
     'redfish_password: expected a string, got true or false (put it in '
     'quotes)'),
    ('node_types__small__volumes', [{'capacity': [1]}],
     'node_types.small.volumes[0].capacity: expected an integer or a '
     'string, got a list'),
])
def test_wrong_type(tmp_path, field, value, problem):
    assert problems(tmp_path, change(**{field: value})) == [problem]


def test_missing_required_keys(tmp_path):
    data = minimal()
    del data['node_types']
    del data['specs'][0]['count']
    assert problems(tmp_path, data) == [
        "(top level): missing required key 'node_types'",
        "specs[0]: missing required key 'count'",
    ]


def test_unknown_node_type(tmp_path):
    data = minimal()
    data['node_types']['big'] = {'memory_mb': 1024, 'vcpus': 2}
    data['specs'].append({'type': 'huge', 'count': 1})
    assert problems(tmp_path, data) == [
        "specs[1].type: unknown node type 'huge' "
        "(node_types declares: small, big)",
    ]


def test_negative_count(tmp_path):
    assert problems(tmp_path, change(specs__0__count=-1)) == [
        'specs[0].count: -1 is less than the minimum of 0',
    ]


def test_count_zero_and_shared_prefixes_are_fine():
    data = minimal()
    data['specs'].append({'type': 'small', 'count': 0})
    assert spec.validate(data)['specs'][1]['count'] == 0


@pytest.mark.parametrize('value, message', [
    (32, '32 is less than the minimum of 64'),
    (2 ** 21, '2097152 is greater than the maximum of 1048576'),
    (256.5, 'expected an integer, got 256.5'),
    ('256', "expected an integer, got '256'"),
])
def test_bad_memory(tmp_path, value, message):
    data = change(node_types__small__memory_mb=value)
    assert problems(tmp_path, data) == [
        'node_types.small.memory_mb: ' + message]


def test_bad_vcpus(tmp_path):
    assert problems(tmp_path, change(node_types__small__vcpus=0)) == [
        'node_types.small.vcpus: 0 is less than the minimum of 1']


@pytest.mark.parametrize('capacity, message', [
    ('2G', "'2G' is ambiguous: write 2GB or 2GiB"),
    ('2gib', "'2gib' has an unknown unit 'gib': use one of B, KB, KiB, "
             'MB, MiB, GB, GiB, TB, TiB (case matters)'),
    ('1000B', "'1000B' (1000 bytes) is not a multiple of the 512-byte disk "
              'sector and is not rounded: use e.g. 512 or 1024 bytes'),
    (0, '0 must be greater than 0'),
    ('0GiB', "'0GiB' must be greater than 0"),
    (-1024, '-1024 must be greater than 0'),
    ('0.1KiB', "'0.1KiB' is 102.4 bytes, not a whole number of bytes"),
])
def test_bad_capacity(tmp_path, capacity, message):
    data = change(node_types__small__volumes=[{'capacity': 512},
                                              {'capacity': capacity}])
    assert problems(tmp_path, data) == [
        'node_types.small.volumes[1].capacity: ' + message]


def test_bad_volume_format(tmp_path):
    data = change(node_types__small__volumes=[{'capacity': 512,
                                               'format': 'vmdk'}])
    assert problems(tmp_path, data) == [
        "node_types.small.volumes[0].format: 'vmdk' is not one of: "
        'qcow2, raw']


@pytest.mark.parametrize('top', [
    {'physical_networks': ['physnet1']},
    {'physnet_mappings': {'physnet1': 'eth1'}},
    {},
])
def test_undeclared_physnet_is_left_to_the_hostagents(top):
    """A physnet only node types name is one hostagents map, as with the
    Ansible-based Tenks' per-host variables: the deploy checks it."""
    data = change(node_types__small__physical_networks=['physnet1', 'pn2'],
                  **top)
    assert spec.validate(data)['node_types']['small'][
        'physical_networks'] == ['physnet1', 'pn2']


def test_mapping_of_undeclared_physnet(tmp_path):
    data = change(physical_networks=['physnet1'],
                  physnet_mappings={'physnet1': 'eth1', 'pn2': 'eth2'})
    assert problems(tmp_path, data) == [
        "physnet_mappings.pn2: physical network 'pn2' is not declared "
        "(physical_networks declares: physnet1)"]


def test_declared_physnet_need_not_be_mapped():
    data = change(physical_networks=['physnet1', 'physnet2'],
                  physnet_mappings={'physnet1': 'eth1'})
    assert spec.validate(data)['physnet_mappings'] == {'physnet1': 'eth1'}


def test_duplicate_physnets(tmp_path):
    data = change(physical_networks=['a', 'b', 'a', 'b', 'a'],
                  node_types__small__physical_networks=['a', 'a'])
    assert problems(tmp_path, data) == [
        "node_types.small.physical_networks: listed more than once: 'a'",
        "physical_networks: listed more than once: 'a', 'b', 'a'",
    ]


@pytest.mark.parametrize('name, interface', [
    ('physnet1', 'eth/1'),
    ('physnet1', 'eth 1'),
    ('physnet1', 'a-very-long-name'),
    ('physnet1', ''),
    ('physnet1', '..'),
    ('physnet1', '.'),
    ('physnet1', 'eth0:1'),
])
def test_bad_interface_name(tmp_path, name, interface):
    data = change(physnet_mappings={name: interface})
    assert problems(tmp_path, data) == [
        'physnet_mappings.physnet1: %r is invalid: expected an interface '
        "or bridge name: 1 to 15 characters, no '/', ':' or whitespace, "
        "not '.' or '..'" % interface]


@pytest.mark.parametrize('changes, message', [
    ({'ipmi_username': 'u' * 17},
     'ipmi_username: is longer than 16 characters'),
    ({'ipmi_username': 'bad\tname'},
     "ipmi_username: 'bad\\tname' is invalid: expected printable ASCII "
     'characters'),
    # Never echoed: a password's problem says what it should be.
    ({'ipmi_password': 'p\u00e4ssword'},
     'ipmi_password: is invalid: expected printable ASCII characters'),
    ({'ipmi_password': 'p' * 21},
     'ipmi_password: is longer than 20 characters'),
])
def test_ipmi_credentials_ipmi_can_carry(tmp_path, changes, message):
    assert problems(tmp_path, change(**changes)) == [message]


@pytest.mark.parametrize('changes, message', [
    ({'ipmi_port_range_end': 6229},
     'ipmi_port_range_end: 6229 is less than ipmi_port_range_start (6230)'),
    ({'ipmi_port_range_start': 0},
     'ipmi_port_range_start: 0 is less than the minimum of 1'),
    ({'ipmi_port_range_end': 65536},
     'ipmi_port_range_end: 65536 is greater than the maximum of 65535'),
])
def test_bad_port_range(tmp_path, changes, message):
    assert problems(tmp_path, change(**changes)) == [message]


def test_port_range_is_each_bmc_address_s():
    """More IPMI nodes than the range has ports: valid, as three
    hypervisors hold three times the range (the scheduler decides)."""
    data = change(specs__0__count=33)
    assert spec.validate(data)['specs'][0]['count'] == 33


@pytest.mark.parametrize('field, value, path, expected', [
    ('cluster', 'Quick', 'cluster', "1 to 31 lowercase letters, digits or "
     "'-', not starting with '-'"),
    ('cluster', '-a', 'cluster', None),
    ('cluster', 'a' * 32, 'cluster', None),
    ('cluster', 'a\n', 'cluster', None),
    ('specs__0__node_name_prefix', 'node-name', 'specs[0].node_name_prefix',
     "a lowercase letter, then up to 7 lowercase letters, digits or '-'"),
    ('specs__0__node_name_prefix', '1tk', 'specs[0].node_name_prefix', None),
    ('specs__0__vol_name_prefix', 'Vol', 'specs[0].vol_name_prefix',
     "a lowercase letter, then up to 15 lowercase letters, digits, '_' or "
     "'-'"),
    ('bridge_prefix', 'br-tenks', 'bridge_prefix', 'a lowercase letter, '
     'then up to 11 lowercase letters or digits'),
    ('bridge_prefix', 'b' * 13, 'bridge_prefix', None),
])
def test_bad_names(tmp_path, field, value, path, expected):
    [problem] = problems(tmp_path, change(**{field: value}))
    assert problem.startswith('%s: %r is invalid: expected ' % (path, value))
    if expected:
        assert problem.endswith(expected)


def test_bad_node_type_name(tmp_path):
    data = minimal()
    data['node_types']['big one'] = {'memory_mb': 256, 'vcpus': 1}
    assert problems(tmp_path, data) == [
        "node_types: invalid key 'big one': expected letters, digits, '_', "
        "'.' or '-'"]


def test_bridge_type_is_linuxbridge_or_openvswitch(tmp_path):
    assert spec.load(write(tmp_path, change(bridge_type='openvswitch')))[
        'bridge_type'] == 'openvswitch'
    assert problems(tmp_path, change(bridge_type='ovs')) == [
        "bridge_type: 'ovs' is not one of: linuxbridge, openvswitch, fake"]


def test_bad_enum_lists_allowed_values(tmp_path):
    assert problems(tmp_path, change(libvirt_domain_type='xen')) == [
        "libvirt_domain_type: 'xen' is not one of: qemu, kvm"]


def test_bad_ipmi_address(tmp_path):
    assert problems(tmp_path, change(ipmi_address='localhost')) == [
        "ipmi_address: 'localhost' does not appear to be an IPv4 or IPv6 "
        'address']


@pytest.mark.parametrize('field', ['ipmi_username', 'ipmi_password'])
def test_empty_credentials(tmp_path, field):
    assert problems(tmp_path, change(**{field: ''})) == [
        field + ': must not be empty']


@pytest.mark.parametrize('field, address, why', [
    ('ipmi_address', '0.0.0.0',
     'the unspecified address (every address of the host)'),
    ('ipmi_address', '255.255.255.255', 'the broadcast address'),
    ('ipmi_address', '224.0.0.5', 'a multicast address'),
    ('ipmi_address', 'ff02::1', 'a multicast address'),
    ('redfish_address', '240.0.0.1', 'a reserved address'),
])
def test_bmc_addresses_are_one_host_s(tmp_path, field, address, why):
    assert problems(tmp_path, change(**{field: address})) == [
        '%s: %s is %s; BMCs listen on one address of the hypervisor, which '
        'Ironic dials' % (field, address, why)]


def test_empty_node_types_and_specs(tmp_path):
    assert problems(tmp_path, change(node_types={}, specs=[])) == [
        'node_types: must not be empty',
        'specs: must not be empty',
    ]


def test_several_problems_are_all_reported(tmp_path):
    data = change(bogus=1, specs__0__count=-1, ipmi_port_range_end=1,
                  node_types__small__vcpus='one',
                  node_types__small__volumes=[{'capacity': '2G'}])
    data['specs'].append({'type': 'huge', 'count': 1})
    assert problems(tmp_path, data) == [
        "(top level): unknown key 'bogus'",
        "node_types.small.vcpus: expected an integer, got 'one'",
        "node_types.small.volumes[0].capacity: '2G' is ambiguous: write "
        '2GB or 2GiB',
        'specs[0].count: -1 is less than the minimum of 0',
        "specs[1].type: unknown node type 'huge' (node_types declares: "
        'small)',
        'ipmi_port_range_end: 1 is less than ipmi_port_range_start (6230)',
    ]


def test_yaml_syntax_error_names_line_and_column(tmp_path):
    text = 'cluster: a\nnode_types:\n  small: {memory_mb: 64\nspecs: []\n'
    [problem] = problems(tmp_path, text)
    assert problem.startswith('invalid YAML at line 4, column 6: ')


def test_yaml_duplicate_key(tmp_path):
    text = 'cluster: a\nnode_types: {}\ncluster: b\n'
    assert problems(tmp_path, text) == [
        "invalid YAML at line 3, column 1: duplicate key 'cluster'"]


def test_yaml_merge_keys_may_be_overridden(tmp_path):
    text = ('cluster: a\nnode_types:\n  small:\n'
            '    <<: {memory_mb: 64, vcpus: 1}\n    vcpus: 2\n'
            'specs: [{type: small, count: 1}]\n')
    loaded = spec.load(write(tmp_path, text))
    assert loaded['node_types']['small']['vcpus'] == 2


@pytest.mark.parametrize('text, message', [
    ('', '(top level): expected a mapping, got no value'),
    ('- a\n', '(top level): expected a mapping, got a list'),
])
def test_not_a_mapping(tmp_path, text, message):
    assert problems(tmp_path, text) == [message]


def test_missing_file(tmp_path):
    path = tmp_path / 'absent.yaml'
    with pytest.raises(exceptions.SpecError) as info:
        spec.load(path)
    assert info.value.problems == [
        'cannot read the file: No such file or directory']
    assert str(info.value).startswith('%s: invalid cluster spec' % path)


def test_file_not_utf8(tmp_path):
    path = tmp_path / 'spec.yaml'
    path.write_bytes(b'cluster: \xff\n')
    with pytest.raises(exceptions.SpecError) as info:
        spec.load(path)
    [problem] = info.value.problems
    assert problem.startswith('cannot read the file: not UTF-8 text')


# Override files of the Ansible-based Tenks

DATA = __import__('pathlib').Path(__file__).parent.parent / 'data'


def test_tenks_example_override_loads_unchanged(caplog):
    loaded = spec.load(DATA / 'ansible-override.yml')
    assert loaded['cluster'] == spec.DEFAULT_CLUSTER == 'default'
    assert loaded['node_types']['bm-small']['volumes'] == [
        {'capacity': 3 * 10 ** 9, 'format': 'qcow2'}]
    assert loaded['physical_networks'] == ['provision']
    assert loaded['specs'][0]['ironic_config']['resource_class'] == (
        'bm_small')
    assert caplog.records == []


def test_top_level_name_prefixes_are_every_entry_s_default(tmp_path):
    """As in the Ansible-based Tenks: node_name_prefix and
    vol_name_prefix at the top of an override file apply to the specs
    entries that set none."""
    data = change(node_name_prefix='ab', vol_name_prefix='disk')
    data['specs'].append({'type': 'small', 'count': 1,
                          'node_name_prefix': 'cd'})
    loaded = spec.validate(data)
    assert [(e['node_name_prefix'], e['vol_name_prefix'])
            for e in loaded['specs']] == [('ab', 'disk'), ('cd', 'disk')]
    assert 'node_name_prefix' not in loaded
    assert problems(tmp_path, change(node_name_prefix='AB')) == [
        "node_name_prefix: 'AB' is invalid: expected a lowercase letter, "
        "then up to 7 lowercase letters, digits or '-'"]


def test_tenks_ci_override_loads_with_one_warning(caplog):
    path = DATA / 'ansible-ci-overrides.yml'
    loaded = spec.load(path)
    [warning] = caplog.records
    assert warning.levelname == 'WARNING'
    assert warning.getMessage() == (
        '%s: ignored: ansible_python_interpreter, '
        'python_upper_constraints_url (they only steer the Ansible-based '
        'Tenks)' % path)
    assert 'ansible_python_interpreter' not in loaded
    assert 'python_upper_constraints_url' not in loaded
    assert loaded['node_types']['ci-node']['console_log_enabled'] is True
    assert loaded['nova_flavors'] == []
    # What the CLI sends the conductor validates again, silently.
    caplog.clear()
    assert spec.validate(loaded) == loaded
    assert caplog.records == []


def test_console_log_enabled_per_node_type(tmp_path):
    """Tenks' meaning: log each node's serial console, or not."""
    assert spec.validate(minimal())['node_types']['small'][
        'console_log_enabled'] is True
    loaded = spec.validate(
        change(node_types__small__console_log_enabled=False))
    assert loaded['node_types']['small']['console_log_enabled'] is False
    assert problems(tmp_path, change(
        node_types__small__console_log_enabled='no')) == [
        "node_types.small.console_log_enabled: expected true or false, "
        "got 'no'"]


@pytest.mark.parametrize('key', [
    'cmd', 'virtualenv_path', 'python_upper_constraints_url',
    'system_requirements', 'allocations_file_path', 'state_file_path',
    'ansible_become'])
def test_ansible_only_keys_are_ignored(caplog, key):
    data = dict(minimal(), **{key: 'anything'})
    assert key not in spec.validate(data, source='f.yml')
    assert caplog.messages == [
        'f.yml: ignored: %s (they only steer the Ansible-based Tenks)'
        % key]


def test_other_unknown_keys_are_still_errors(tmp_path):
    data = dict(minimal(), virtualenv='/opt/venv', ansible=1)
    assert problems(tmp_path, data) == [
        "(top level): unknown key 'virtualenv' (did you mean "
        "'virtualenv_path'?)",
        "(top level): unknown key 'ansible'",
    ]


@pytest.mark.parametrize('field,value,problem', [
    ('bmc_emulators', {'ipmi': 'sushy-tools'},
     "bmc_emulators.ipmi: 'sushy-tools' is not one of: virtualbmc"),
    ('bmc_emulators', {'virtualbmc': 'ipmi'},
     "bmc_emulators: unknown key 'virtualbmc'"),
    ('log_directory', '/var/log/tenks/',
     'log_directory: set per hypervisor here, as [hostagent] '
     'console_log_dir in the configuration of its hostagent, not in the '
     'spec'),
    ('libvirt_local_uri', 'qemu:///system',
     'libvirt_local_uri: set per hypervisor here, as [hostagent] '
     'libvirt_uri in the configuration of its hostagent, not in the spec'),
])
def test_tenks_keys_of_what_is_not_built(tmp_path, field, value, problem):
    assert problems(tmp_path, change(**{field: value})) == [problem]


def test_bmc_emulators_as_tenks_defaults_them():
    # The Ansible-based Tenks' defaults, pasted.
    emulators = {'agent_ipmitool': 'virtualbmc',
                 'agent_ipmitool_socat': 'virtualbmc',
                 'ipmi': 'virtualbmc',
                 'pxe_ipmitool': 'virtualbmc',
                 'pxe_ipmitool_socat': 'virtualbmc',
                 'pxe_snmp': 'virtualpdu',
                 'redfish': 'sushy-tools',
                 'snmp': 'virtualpdu'}
    loaded = spec.validate(dict(minimal(), bmc_emulators=emulators))
    assert loaded['bmc_emulators'] == emulators


@pytest.mark.parametrize('field,value,problem', [
    ('bmc_emulators', {'pxe_ipmitool_socat': 'virtualpdu'},
     "bmc_emulators.pxe_ipmitool_socat: 'virtualpdu' is not one of: "
     "virtualbmc"),
    ('bmc_emulators', {'pxe_snmp': 'virtualbmc'},
     "bmc_emulators.pxe_snmp: 'virtualbmc' is not one of: virtualpdu"),
    ('bmc_emulators', {'pxe_ipmitool_socat_x': 'virtualbmc'},
     "bmc_emulators: unknown key 'pxe_ipmitool_socat_x'"),
    ('node_types__small__ironic_driver', 'ilo',
     "node_types.small.ironic_driver: 'ilo' is not one of: ipmi, redfish, "
     "snmp"),
])
def test_bmc_emulators_and_snmp(tmp_path, field, value, problem):
    assert problems(tmp_path, change(**{field: value})) == [problem]


def test_libvirt_require_vt_asks_for_kvm(tmp_path):
    assert spec.validate(dict(minimal(), libvirt_require_vt=True))[
        'libvirt_domain_type'] == 'kvm'
    loaded = spec.validate(dict(minimal(), libvirt_require_vt=False))
    assert loaded['libvirt_domain_type'] == 'qemu'
    assert 'libvirt_require_vt' not in loaded
    assert problems(tmp_path, change(libvirt_require_vt=True,
                                     libvirt_domain_type='qemu')) == [
        'libvirt_require_vt: true asks for KVM, but libvirt_domain_type '
        'is qemu']


def test_ipmi_password_fits_ipmi_2():
    # lanplus refuses longer passwords: ipmitool and Ironic could never
    # reach the BMC.
    assert spec.validate(change(ipmi_password='p' * 20))['ipmi_password']
    with pytest.raises(exceptions.SpecError) as info:
        spec.validate(change(ipmi_password='p' * 21))
    assert info.value.problems == [
        'ipmi_password: is longer than 20 characters']


def test_redfish_nodes_take_no_ipmi_port():
    data = change(specs__0__count=12, node_types__small__ironic_driver=
                  'redfish', node_types__small__volumes=[{'capacity': '1GiB'}],
                  node_types__small__physical_networks=['physnet1'],
                  physical_networks=['physnet1'])
    loaded = spec.validate(data)
    assert loaded['node_types']['small']['ironic_driver'] == 'redfish'
    assert node_records.bmc_type(loaded, 'small') == 'redfish'
    # The address defaults to ipmi_address's.
    assert spec.validate(change(ipmi_address='127.0.0.2'))[
        'redfish_address'] == '127.0.0.2'


@pytest.mark.parametrize('field,value,problem', [
    ('redfish_port', 0, 'redfish_port: 0 is less than the minimum of 1'),
    ('redfish_address', 'here', "redfish_address: 'here' does not appear "
     'to be an IPv4 or IPv6 address'),
    ('redfish_username', 'a:b', "redfish_username: 'a:b' is invalid: "
     'expected 1 to 64 characters, no colon or whitespace'),
    ('redfish_password', '',  'redfish_password: must not be empty'),
    ('redfish_password', 'p' * 73, 'redfish_password: is longer than 72 '
     'bytes (the emulator keeps a bcrypt hash of it)'),
    ('redfish_verify_ca', 1, 'redfish_verify_ca: expected true or false or '
     'a string, got 1'),
    ('bmc_emulators', {'redfish': 'virtualbmc'},
     "bmc_emulators.redfish: 'virtualbmc' is not one of: sushy-tools"),
])
def test_bad_redfish_keys(tmp_path, field, value, problem):
    assert problems(tmp_path, change(**{field: value})) == [problem]
