"""What registration would change on an Ironic node, and when Ironic
would refuse it."""

import types

import pytest

from tenks import exceptions
from tenks.cloud import ironic

INFO = {'ipmi_address': '127.0.0.1', 'ipmi_port': 6230,
        'ipmi_username': 'admin', 'ipmi_password': 'secret'}
WANTED = {'id': 'u1', 'name': 'tk0', 'driver': 'ipmi',
          'resource_class': 'gold', 'properties': {'cpus': 1},
          'boot_interface': 'pxe', 'driver_info': INFO}
DEFAULTS = {'boot_interface': 'ipxe', 'deploy_interface': 'direct'}


def ironic_node(**fields):
    node = dict(id='u1', name='tk0', driver='ipmi', resource_class='gold',
                properties={'cpus': 1}, conductor_group='', shard=None,
                boot_interface='pxe', deploy_interface='direct',
                provision_state='available', is_maintenance=False,
                driver_info=dict(INFO, ipmi_port='6230',
                                 ipmi_password='******'))
    node.update(fields)
    return types.SimpleNamespace(**node)


def test_a_converged_node_needs_nothing():
    # Ironic may give the port back as a string; the password masked.
    assert ironic.node_updates(ironic_node(), WANTED, DEFAULTS) == {}


def test_the_vendor_ironic_detects_is_no_difference():
    """Ironic records the vendor it detects as it verifies a node; a spec
    that names one still gets it."""
    current = ironic_node(properties={'cpus': 1, 'vendor': 'unknown'})
    assert ironic.node_updates(current, WANTED, DEFAULTS) == {}
    wanted = dict(WANTED, properties={'cpus': 1, 'vendor': 'tenks'})
    assert ironic.node_updates(current, wanted, DEFAULTS) == {
        'properties': {'cpus': 1, 'vendor': 'tenks'}}


def test_each_differing_field_is_updated():
    current = ironic_node(resource_class='silver', properties={'cpus': 2},
                          conductor_group='g1', shard='s1',
                          deploy_interface='ramdisk')
    assert ironic.node_updates(current, WANTED, DEFAULTS) == {
        'resource_class': 'gold', 'properties': {'cpus': 1},
        'conductor_group': '', 'shard': None,
        # Not named by the spec: back to the driver's default.
        'deploy_interface': 'direct'}


def test_driver_info_is_sent_whole_when_it_differs():
    for current in (
            ironic_node(driver_info=dict(INFO, ipmi_port='6231')),
            ironic_node(driver_info=dict(INFO, deploy_kernel='k'))):
        assert ironic.node_updates(current, WANTED, DEFAULTS) == {
            'driver_info': INFO}
    # A new password cannot be seen: the caller says so.
    assert ironic.node_updates(
        ironic_node(), WANTED, DEFAULTS, password_changed=True) == {
            'driver_info': INFO}


def test_a_new_driver_leaves_interfaces_to_its_reset():
    current = ironic_node(driver='redfish', boot_interface='redfish-virtual')
    assert ironic.node_updates(current, WANTED, {}) == {
        'driver': 'ipmi'}


def port_changes(update=()):
    return {'create': [], 'delete': [], 'update': [
        (types.SimpleNamespace(address=mac), {}) for mac in update]}


@pytest.mark.parametrize('state', ['enroll', 'manageable', 'available'])
def test_resting_states_allow_every_change(state):
    ironic._check_state(
        ironic_node(provision_state=state),
        {'resource_class': 'x', 'driver': 'y', 'boot_interface': 'z'},
        port_changes(update=['m1']))


def test_an_active_node_refuses_class_interfaces_and_port_moves():
    with pytest.raises(exceptions.CloudError) as raised:
        ironic._check_state(
            ironic_node(provision_state='active'),
            {'resource_class': 'x', 'boot_interface': 'z', 'properties': {}},
            port_changes(update=['m1']))
    assert str(raised.value) == (
        'Ironic refused to update node tk0 (u1): boot_interface, '
        'resource_class, ports m1 (physical_network, local_link_connection) '
        'cannot change in provision state active')
    # What Ironic allows there passes, and anything in maintenance.
    ironic._check_state(ironic_node(provision_state='active'), {
        'properties': {}, 'driver_info': {}, 'name': 'n'}, port_changes())
    ironic._check_state(
        ironic_node(provision_state='active', is_maintenance=True),
        {'resource_class': 'x'}, port_changes(update=['m1']))


def test_deployed_states():
    for state in ('active', 'deploying', 'wait call-back', 'deploy failed',
                  'error', 'rescue', 'adopt failed', 'cleaning',
                  'a state of a newer Ironic'):
        assert ironic.deployed(state), state
    for state in (None, 'enroll', 'manageable', 'available',
                  'inspect failed', 'clean failed'):
        assert not ironic.deployed(state), state


def test_provision_states_come_from_one_list():
    calls = []

    def nodes(**query):
        calls.append(query)
        return [types.SimpleNamespace(id='u1', provision_state='active'),
                types.SimpleNamespace(id='other', provision_state='enroll')]

    conn = types.SimpleNamespace(baremetal=types.SimpleNamespace(
        nodes=nodes))
    assert ironic.provision_states(conn, ['u1', 'u2']) == {
        'u1': 'active', 'u2': None}
    assert calls == [{'fields': ('uuid', 'provision_state')}]


def sdk_error(status, details):
    from openstack import exceptions as sdk
    return sdk.HttpException(
        message='%d: Client Error' % status, details=details,
        http_status=status)


@pytest.mark.parametrize('status, details, transient', [
    (409, 'Node 1f2e is locked by host c1, please retry after the current '
          'operation is completed.', True),
    (409, 'Node 1f2e is in state deploying', True),
    (503, 'Service Unavailable', True),
    (500, None, True),
    # Tried again for as long, it would still be there.
    (409, 'A port with MAC address 52:54:00:aa:bb:01 already exists.',
     False),
    (409, 'A node with name tk0 already exists.', False),
    (400, 'Invalid input', False),
])
def test_what_enrolment_tries_again(status, details, transient):
    assert ironic._transient(sdk_error(status, details)) is transient
    assert ironic._transient(ValueError('not from Ironic')) is False


def test_a_connection_closed_under_a_request_is_tried_again():
    from keystoneauth1 import exceptions as ksa_exceptions
    assert ironic._transient(ksa_exceptions.ConnectFailure(
        "('Connection aborted.', ConnectionResetError(104))")) is True
    # Not an answer that would stay the same.
    assert ironic._transient(ksa_exceptions.SSLError('bad cert')) is False
