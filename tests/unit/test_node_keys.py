"""Node type keys cpu_mode and machine (spec, scheduler, domain XML), and
BMC addresses in IPv6 as operators and Ironic read them."""

from xml.etree import ElementTree as ET

import pytest

from hostagent.drivers.virt import libvirt as libvirt_driver
from tenks import exceptions
from tenks import reconcile
from tenks import scheduler
from tenks.cloud import ironic
from tests.unit.conftest import make_spec
from tests.unit.test_filter_scheduler import facts
from tests.unit.test_firmware import OWNER
from tests.unit.test_firmware import domain
from tests.unit.test_firmware import driver  # noqa: F401 (a fixture)

MACHINES = ['pc', 'q35', 'pc-i440fx-7.2', 'pc-q35-7.2']
# What libvirt reports under TCG: no host-passthrough.
TCG = {'machines': {'qemu': MACHINES},
       'cpu_modes': {'qemu': ['maximum', 'host-model', 'custom']}}


def node_spec(**node_type):
    return make_spec(node_types={'t': dict(
        {'memory_mb': 128, 'vcpus': 1, 'physical_networks': ['physnet1']},
        **node_type)}, specs=[{'type': 't', 'count': 1}])


def problems(**node_type):
    with pytest.raises(exceptions.SpecError) as raised:
        node_spec(**node_type)
    return str(raised.value)


# The spec

def test_cpu_mode_and_machine_are_accepted():
    loaded = node_spec(cpu_mode='host-model', machine='pc-q35-7.2')
    assert loaded['node_types']['t']['cpu_mode'] == 'host-model'
    assert loaded['node_types']['t']['machine'] == 'pc-q35-7.2'


def test_bad_cpu_mode_and_machine_are_refused():
    assert "node_types.t.cpu_mode: 'custom' is not one of" in problems(
        cpu_mode='custom')
    assert 'node_types.t.machine: ' in problems(machine='q35 --evil')


def test_secure_boot_needs_a_q35_machine():
    assert ('node_types.t.machine: pc cannot have secure boot, which needs '
            'SMM' in problems(boot_mode='uefi', secure_boot=True,
                              machine='pc'))
    node_spec(boot_mode='uefi', secure_boot=True, machine='pc-q35-7.2')


# The scheduler

def test_an_unsupported_machine_names_the_type_the_value_and_the_host():
    with pytest.raises(exceptions.MachineUnsupported) as raised:
        scheduler.schedule(node_spec(machine='pc-q35-99.0'),
                           {'hv1': facts('hv1', **TCG)}, [])
    assert str(raised.value) == (
        'Hypervisor hv1 cannot run node type t (specs[0]): libvirt has no '
        'machine type pc-q35-99.0 for qemu domains (it has: pc, q35, '
        'pc-i440fx-7.2, pc-q35-7.2)')


def test_host_passthrough_is_refused_under_tcg():
    with pytest.raises(exceptions.MachineUnsupported) as raised:
        scheduler.schedule(node_spec(cpu_mode='host-passthrough'),
                           {'hv1': facts('hv1', **TCG)}, [])
    assert ('libvirt does not support CPU mode host-passthrough for qemu '
            'domains (it supports: maximum, host-model, custom)'
            in str(raised.value))


def test_nodes_go_to_the_hosts_that_support_their_keys():
    kvm = {'machines': {'qemu': MACHINES, 'kvm': MACHINES},
           'cpu_modes': {'kvm': ['host-passthrough']}}
    all_facts = {'hv1': facts('hv1', **TCG), 'hv2': facts('hv2', **kvm),
                 # A hostagent that does not report them.
                 'hv3': facts('hv3')}
    spec = node_spec(cpu_mode='host-passthrough', machine='q35')
    spec['libvirt_domain_type'] = 'kvm'
    spec['specs'][0]['count'] = 2
    assert {n['hypervisor'] for n in scheduler.schedule(
        spec, all_facts, [])} == {'hv2'}
    message = str(pytest.raises(exceptions.NoValidHost, scheduler.schedule,
                                node_spec(machine='q35'),
                                {'hv3': facts('hv3'), 'hv4': facts('hv4')},
                                []).value)
    assert 'hostagent does not report machine types' in message
    # Without the keys, every host will do.
    assert scheduler.schedule(node_spec(), {'hv3': facts('hv3')}, [])


# The domain

CAPABILITIES = '''<capabilities><guest><os_type>hvm</os_type>
<arch name='x86_64'><machine maxCpus='255'>pc-i440fx-7.2</machine>
<machine canonical='pc-i440fx-7.2' maxCpus='255'>pc</machine>
<machine maxCpus='288'>pc-q35-7.2</machine>
<machine canonical='pc-q35-7.2' maxCpus='288'>q35</machine>
<domain type='qemu'/><domain type='kvm'/></arch></guest>
<guest><os_type>hvm</os_type><arch name='i686'>
<machine>isapc</machine><domain type='qemu'/></arch></guest>
</capabilities>'''


def test_machine_types_are_read_from_the_capabilities_aliases_first():
    machines = libvirt_driver._guest_machines(CAPABILITIES)
    assert machines['qemu'] == machines['kvm'] == {
        'pc-i440fx-7.2': 'pc-i440fx-7.2', 'pc': 'pc-i440fx-7.2',
        'pc-q35-7.2': 'pc-q35-7.2', 'q35': 'pc-q35-7.2'}
    assert libvirt_driver._listed(machines['qemu']) == [
        'pc', 'q35', 'pc-i440fx-7.2', 'pc-q35-7.2']


def test_the_domain_xml_has_the_cpu_mode_and_machine(driver):  # noqa: F811
    root = ET.fromstring(driver._domain_xml(
        domain(cpu_mode='maximum', machine='pc-q35-7.2'), OWNER))
    assert root.find('cpu').get('mode') == 'maximum'
    assert root.find('os/type').get('machine') == 'pc-q35-7.2'
    root = ET.fromstring(driver._domain_xml(domain(), OWNER))
    assert root.find('cpu') is None


class Connection:
    """libvirt's answers on this machine under TCG."""

    def getCapabilities(self):
        return CAPABILITIES

    def getDomainCapabilities(self, emulator, arch, machine, virt, flags):
        return ("<domainCapabilities><cpu><mode name='host-passthrough' "
                "supported='%s'/><mode name='maximum' supported='yes'/>"
                "</cpu></domainCapabilities>"
                % ('yes' if virt == 'kvm' else 'no'))


def test_the_agent_resolves_aliases_and_refuses_what_libvirt_lacks():
    resolved = libvirt_driver.LibvirtDriver._resolved(
        Connection(), domain(machine='q35', cpu_mode='maximum'))
    assert resolved['machine'] == 'pc-q35-7.2'
    with pytest.raises(exceptions.DriverError) as raised:
        libvirt_driver.LibvirtDriver._resolved(Connection(),
                                               domain(machine='pc-9'))
    assert ('libvirt has no machine type pc-9 for qemu domains (it has: '
            'pc, q35, pc-i440fx-7.2, pc-q35-7.2)' in str(raised.value))
    with pytest.raises(exceptions.DriverError) as raised:
        libvirt_driver.LibvirtDriver._resolved(
            Connection(), domain(cpu_mode='host-passthrough'))
    assert 'does not support CPU mode host-passthrough for qemu' in str(
        raised.value)
    assert libvirt_driver.LibvirtDriver._resolved(
        Connection(), domain(domain_type='kvm', cpu_mode='host-passthrough'))


def stored(xml, **attributes):
    """``xml`` as libvirt keeps it: versioned machine, default CPU."""
    root = ET.fromstring(xml)
    root.find('os/type').set('machine', attributes.get('machine',
                                                       'pc-i440fx-7.2'))
    if root.find('cpu') is None:
        ET.SubElement(root, 'cpu', mode='custom', match='exact')
    return ET.tostring(root, encoding='unicode')


def test_a_named_machine_is_compared_exactly_the_default_by_family(
        driver):  # noqa: F811
    plain = driver._domain_xml(domain(), OWNER)
    # libvirt's default CPU and machine are no change.
    assert libvirt_driver._summary(stored(plain)) == (
        libvirt_driver._summary(plain))
    wanted = driver._domain_xml(domain(machine='pc-q35-7.2',
                                       cpu_mode='maximum'), OWNER)
    summary = libvirt_driver._summary(wanted, exact_machine=True)
    assert libvirt_driver._differences(libvirt_driver._summary(
        stored(wanted, machine='pc-q35-6.2'), exact_machine=True),
        summary) == ['machine pc-q35-6.2 -> pc-q35-7.2']
    assert libvirt_driver._differences(libvirt_driver._summary(
        stored(plain), exact_machine=True), summary) == [
            'machine pc-i440fx-7.2 -> pc-q35-7.2', 'cpu_mode None -> maximum']


def test_a_changed_key_is_a_domain_update_in_the_plan():
    old = {'name': 'n0', 'hypervisor': 'hv1', 'memory_mb': 128, 'vcpus': 1,
           'domain_type': 'qemu', 'console_log_enabled': False,
           'console_log': None, 'boot_mode': 'bios', 'secure_boot': False,
           'cpu_mode': None, 'machine': 'q35', 'volumes': [], 'nics': [],
           'bmc': {}, 'ironic': None}
    new = dict(old, cpu_mode='maximum', machine='pc')
    assert [(c['resource'], c['action'], c['field'], c['old'], c['new'])
            for c in reconcile.node_changes(old, new)] == [
        ('domain', 'update', 'cpu_mode', None, 'maximum'),
        ('domain', 'update', 'machine', 'q35', 'pc')]


# IPv6 BMC addresses

def test_ipv6_bmc_addresses_in_driver_info_and_endpoints():
    spec = {'ipmi_password': 'pw', 'redfish_password': 'rpw'}
    ipmi = {'type': 'ipmi', 'address': '::1', 'port': 6230,
            'username': 'admin'}
    info = ironic.bmc_driver_info(ipmi, spec)
    # Ironic passes ipmi_address to ipmitool -H as it is.
    assert (info['ipmi_address'], info['ipmi_port']) == ('::1', 6230)
    assert reconcile.endpoint(ipmi) == '[::1]:6230'
    redfish = {'type': 'redfish', 'address': 'fd00::5', 'port': 8000,
               'username': 'admin', 'system_id': 'abc', 'tls': True}
    assert ironic.bmc_driver_info(redfish, spec)['redfish_address'] == (
        'https://[fd00::5]:8000')
    assert reconcile.endpoint(redfish) == (
        'https://[fd00::5]:8000/redfish/v1/Systems/abc')
    assert reconcile.endpoint(dict(ipmi, address='10.0.0.1')) == (
        '10.0.0.1:6230')

