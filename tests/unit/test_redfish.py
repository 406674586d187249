"""Redfish BMCs: scheduling, the plan, Ironic's driver_info, whole-node
requests on fake drivers, and the sushy-tools driver's own files."""

import contextlib
import json
import os
import shutil
from concurrent import futures

import pytest

from conductor import planner
from hostagent.drivers.bmc import allowlist
from hostagent.drivers.bmc import daemon_dirs
from hostagent.drivers.bmc import sushy
from tenks import constants
from tenks import exceptions
from tenks import node_records
from tenks import reconcile
from tenks import scheduler
from tenks.cloud import ironic
from tests.unit import test_nodes
from tests.unit.conftest import make_spec
from tests.unit.test_reconcile import deployed
from tests.unit.test_reconcile import plan
from tests.unit.test_scheduler import facts

agent = test_nodes.agent
OWNER = test_nodes.OWNER
UUID = test_nodes.node()['uuid']


def mixed_spec(ipmi=1, redfish=2, **top):
    return make_spec(
        node_types={
            'ipmi': {'memory_mb': 64, 'vcpus': 1},
            # sushy-tools sets the boot device on a disk or a NIC.
            'rf': {'memory_mb': 64, 'vcpus': 1, 'ironic_driver': 'redfish',
                   'volumes': [{'capacity': '1GiB'}],
                   'physical_networks': ['physnet1']}},
        specs=[{'type': 'ipmi', 'count': ipmi, 'node_name_prefix': 'ip'},
               {'type': 'rf', 'count': redfish, 'node_name_prefix': 'rf'}],
        **top)


def test_redfish_nodes_share_the_host_endpoint_and_take_no_ipmi_port():
    spec = mixed_spec(ipmi_port_range_end=6230, redfish_port=9100)
    nodes = scheduler.schedule(spec, {'hv1': facts(redfish_port=9100)}, [])
    endpoints = [(n['name'], n['bmc_type'], n['bmc_port'],
                  n['bmc_system_id'] == n['uuid']) for n in nodes]
    assert endpoints == [('ip0', 'ipmi', 6230, False),
                         ('rf0', 'redfish', 9100, True),
                         ('rf1', 'redfish', 9100, True)]
    assert nodes[0]['bmc_system_id'] is None


def test_default_driver_and_bmc_emulators_choose_the_type():
    spec = make_spec(default_ironic_driver='redfish',
                     bmc_emulators={'redfish': 'sushy-tools'})
    assert node_records.bmc_type(spec, 'small') == 'redfish'
    assert node_records.bmc_type(make_spec(), 'small') == 'ipmi'


def test_an_endpoint_of_another_cluster_is_refused():
    first = scheduler.schedule(mixed_spec(cluster='a', ipmi=0),
                               {'hv1': facts()}, [])
    with pytest.raises(exceptions.EndpointInUse) as refused:
        scheduler.schedule(mixed_spec(cluster='b', ipmi=0),
                           {'hv1': facts()}, first)
    assert str(refused.value) == (
        'redfish_port: the Redfish endpoint 127.0.0.1:8000 on hv1 is in '
        'use by cluster a on hv1; choose another redfish_port (or '
        '[hostagent] redfish_port on that host)')
    # Another port will do; IPMI nodes do not care.
    assert scheduler.schedule(mixed_spec(cluster='b', ipmi=0),
                              {'hv1': facts(redfish_port=8001)}, first)
    assert scheduler.schedule(mixed_spec(cluster='b', redfish=0),
                              {'hv1': facts()}, first)


def test_two_hosts_never_share_an_endpoint():
    hosts = {'hv1': facts('hv1'), 'hv2': facts('hv2', memory_mb=8192)}
    nodes = scheduler.schedule(mixed_spec(ipmi=0, redfish=3), hosts, [])
    # All on the host that took the endpoint first (the one with the most
    # memory), none beside it at the same endpoint.
    assert {n['hypervisor'] for n in nodes} == {'hv2'}
    hosts['hv1']['redfish_port'] = 8001
    nodes = scheduler.schedule(mixed_spec(ipmi=0, redfish=3, cluster='b'),
                               dict(hosts, hv2=facts('hv2', memory_mb=32)),
                               [])
    assert {(n['hypervisor'], n['bmc_port']) for n in nodes} == {
        ('hv1', 8001)}


@pytest.mark.parametrize('user,refused', [
    (None, False), ('tenks:unit:deployment-1', False),
    ('tenks:other:x', 'the Redfish emulator of tenks:other:x'),
    ('', 'another process')])
def test_a_taken_endpoint_is_refused_before_anything(user, refused):
    spec = mixed_spec()
    hosts = {'hv1': facts(redfish_user=user)}
    if not refused:
        assert plan(spec, None, [], [], hosts)['nodes']
        return
    with pytest.raises(exceptions.EndpointInUse) as raised:
        plan(spec, None, [], [], hosts)
    assert refused in str(raised.value)


def test_changing_the_driver_replaces_the_bmc_in_place():
    old = mixed_spec(ipmi=1, redfish=0)
    nodes, resources = deployed(old)
    new = mixed_spec(ipmi=1, redfish=0)
    new['node_types']['ipmi']['ironic_driver'] = 'redfish'
    result = plan(new, old, nodes, resources)
    [entry] = result['nodes']
    assert entry['action'] == constants.UPDATE and entry['agent']
    assert entry['new']['record']['bmc_type'] == 'redfish'
    assert entry['new']['bmc'] == {
        'type': 'redfish', 'address': '127.0.0.1', 'port': 8000,
        'username': 'admin', 'system_id': entry['uuid'], 'tls': False}
    assert {(c['field'], c['old'], c['new']) for c in result['changes']
            if c['resource'] == 'bmc'} >= {('type', 'ipmi', 'redfish'),
                                          ('port', 6230, 8000)}
    # And back: an IPMI port again.
    nodes = [entry['new']['record']]
    back = plan(old, new, nodes, resources)
    assert back['nodes'][0]['new']['record']['bmc_port'] == 6230
    assert back['nodes'][0]['new']['record']['bmc_system_id'] is None


def test_a_password_change_updates_the_nodes_of_its_type_only():
    old = mixed_spec()
    nodes, resources = deployed(old)
    new = dict(old, redfish_password='changed')
    result = plan(new, old, nodes, resources)
    assert {e['name']: e['action'] for e in result['nodes']} == {
        'ip0': constants.KEEP, 'rf0': constants.UPDATE,
        'rf1': constants.UPDATE}
    assert {(c['node'], c['field']) for c in result['changes']} == {
        ('rf0', 'redfish_password'), ('rf1', 'redfish_password')}


def test_bmc_drift_enrols_again():
    # An emulator restarted with TLS (the hostagent's configuration
    # changed) is 'differs': its Ironic node gets the https address.
    spec = mixed_spec(ipmi=0, redfish=1)
    spec['specs'][1]['ironic_config'] = {'resource_class': 'rc',
                                         'traits': [], 'properties': {}}
    nodes, resources = deployed(spec)
    result = plan(spec, spec, nodes, resources,
                  hosts={'hv1': facts(redfish_tls=True)})
    [entry] = result['nodes']
    assert entry['action'] == constants.KEEP
    assert entry['new']['bmc']['tls'] is True
    planner.add_drift(result, {entry['uuid']: [['bmc', 'rf0', 'differs']]})
    assert (entry['action'], entry['agent'], entry['enrol']) == (
        constants.UPDATE, True, True)


def test_driver_info_of_each_type():
    spec = mixed_spec(redfish_verify_ca='/etc/ca.pem', redfish_port=9100)
    nodes = scheduler.schedule(spec, {'hv1': facts(redfish_port=9100)}, [])
    views = [reconcile.view(spec, 'd', n, facts(redfish_tls=True))
             for n in nodes]
    assert ironic.bmc_driver_info(views[0]['bmc'], spec) == {
        'ipmi_address': '127.0.0.1', 'ipmi_port': 6230,
        'ipmi_username': 'admin', 'ipmi_password': 'password'}
    assert ironic.bmc_driver_info(views[1]['bmc'], spec) == {
        'redfish_address': 'https://127.0.0.1:9100',
        'redfish_system_id': '/redfish/v1/Systems/%s' % nodes[1]['uuid'],
        'redfish_username': 'admin', 'redfish_password': 'password',
        'redfish_verify_ca': '/etc/ca.pem'}
    ipv6 = dict(views[1]['bmc'], address='::1', tls=False)
    assert reconcile.redfish_url(ipv6) == 'http://[::1]:9100'
    assert views[1]['ironic'] is None  # no ironic_config


def test_secrets_are_masked_in_what_callers_see():
    from tenks.db import models
    masked = models.mask_spec(mixed_spec(redfish_password='x'))
    assert (masked['ipmi_password'], masked['redfish_password']) == (
        '***', '***')


def redfish_node(**bmc):
    return test_nodes.node(bmc=dict(
        {'type': 'redfish', 'address': '127.0.0.1', 'port': 9100,
         'username': 'admin', 'password': 'hush', 'system_id': UUID},
        **bmc))


def test_a_redfish_node_is_a_system_of_its_owner_emulator(agent,
                                                          hypervisor):
    result = agent.nodes.ensure(redfish_node(), OWNER, False)
    assert ['bmc', 'n0'] in result['created']
    assert hypervisor.things[('system', 'n0')] == (OWNER, '127.0.0.1',
                                                   9100, UUID)
    assert ('bmc', 'n0') not in hypervisor.things
    assert agent.nodes.inspect([redfish_node()], OWNER)['nodes'] == {
        UUID: []}
    hypervisor.stopped_bmcs.add('n0')
    assert agent.nodes.inspect([redfish_node()], OWNER)['nodes'] == {
        UUID: [['bmc', 'n0', 'stopped']]}
    del hypervisor.things[('system', 'n0')]
    assert agent.nodes.inspect([redfish_node()], OWNER)['nodes'] == {
        UUID: [['bmc', 'n0', 'missing']]}


def test_changing_type_removes_the_other_bmc(agent, hypervisor):
    agent.nodes.ensure(test_nodes.node(), OWNER, False)
    assert agent.nodes.ensure(redfish_node(), OWNER, False)['changed']
    assert ('bmc', 'n0') not in hypervisor.things
    assert ('system', 'n0') in hypervisor.things
    agent.nodes.ensure(test_nodes.node(), OWNER, False)
    assert ('system', 'n0') not in hypervisor.things
    assert ('bmc', 'n0') in hypervisor.things


def test_remove_node_removes_a_redfish_system(agent, hypervisor):
    agent.nodes.ensure(redfish_node(), OWNER, False)
    result = agent.nodes.remove(
        {'name': 'n0', 'pool': 'p', 'volumes': [{'name': 'n0v0'}],
         'nics': [{'tap': 'n0t0'}]}, OWNER)
    assert ['bmc', 'n0'] in result['removed']
    assert hypervisor.names('system') == []


def test_a_redfish_bmc_needs_its_system_id(agent):
    bad = redfish_node()
    del bad['bmc']['system_id']
    with pytest.raises(exceptions.InvalidNodeRequest) as refused:
        agent.nodes.ensure(bad, OWNER, False)
    assert "'system_id' is a required property" in str(refused.value)


def test_the_allow_list_follows_its_directory(tmp_path):
    path = tmp_path / 'allowed'
    allowed = allowlist.AllowList(str(path))
    assert 'u1' not in allowed and allowed.ids() == frozenset()
    path.mkdir()
    (path / 'u1').write_text('n0')
    assert 'u1' in allowed and 'n0' not in allowed
    (path / 'u1').unlink()
    (path / 'u2').write_text('n1')
    (path / 'u3.tmp').write_text('n2')  # being written
    assert 'u1' not in allowed and 'u2' in allowed and 'u3.tmp' not in allowed
    assert allowed.ids() == {'u2'}
    for bad in ('', '.', '..', '../allowed/u2', None):
        assert bad not in allowed


def emulator(conf):
    """(driver, owner, directory) of an emulator directory of cluster c1,
    made and marked, serving nothing yet."""
    driver = sushy.SushyDriver(conf)
    owner = 'tenks:c1:uuid'
    path = driver._dirs.path(owner)
    os.makedirs(path)
    daemon_dirs.write(os.path.join(path, 'owner'), owner)
    return driver, owner, path


def test_a_system_added_or_removed_touches_its_own_files_only(
        conf, monkeypatch):
    """The emulator's allow-list costs the same per node in a cluster
    of any size: no file of all the systems is read or rewritten."""
    driver, owner, path = emulator(conf)
    for i in range(200):
        sushy._serve(path, 'n%d' % i, 'u%d' % i, None)
    monkeypatch.setattr(driver, '_pid', lambda path: 1)
    monkeypatch.setattr(driver, '_settings', lambda path, address, port: None)
    monkeypatch.setattr(driver, '_ensure_htpasswd', lambda *args: False)
    touched = []
    for name in ('read', 'write'):
        real = getattr(daemon_dirs, name)
        monkeypatch.setattr(daemon_dirs, name, lambda f, *a, real=real: (
            touched.append(os.path.relpath(f, path)) or real(f, *a)))
    listed = []
    real_listdir = os.listdir
    # os.listdir is every thread's: only the emulator directory counts.
    monkeypatch.setattr(os, 'listdir', lambda d: (
        str(d).startswith(path) and listed.append(d) or real_listdir(d)))
    driver.ensure_system(owner, 'n200', 'u200', '127.0.0.1', 9100, 'admin',
                         'pw')
    # (systems: the file of an emulator from before issue 23, if any.)
    assert sorted(touched) == ['allowed/u200', 'domains/n200',
                               'domains/n200', 'owner', 'settings',
                               'systems']
    assert listed == []
    del touched[:]
    assert driver.remove_system('n7', owner) is True
    assert sorted(touched) == ['domains/n7', 'owner']
    assert not os.path.exists(os.path.join(path, 'allowed', 'u7'))
    assert sushy._all_served(path) == {
        'n%d' % i: 'u%d' % i for i in range(201) if i != 7}


def test_systems_removed_at_once_take_the_emulator_with_the_last(
        conf, monkeypatch):
    """Removals run side by side (each under its node's lock only): every
    system goes, and the emulator with the last one, once."""
    driver, owner, path = emulator(conf)
    for i in range(64):
        sushy._serve(path, 'n%d' % i, 'u%d' % i, None)
    removed = []
    monkeypatch.setattr(driver, '_remove', lambda p: (
        removed.append(p), shutil.rmtree(p)))
    with futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: driver.remove_system(
            'n%d' % i, owner), range(64)))
    assert results == [True] * 64
    assert removed == [path] and not os.path.exists(path)
    # Asked again once it is gone: nothing to remove, no error.
    assert driver.remove_system('n0', owner) is False


def test_a_removal_during_the_emulators_removal_finds_it_gone(
        conf, monkeypatch):
    """Another thread is removing the emulator with its last system: its
    owner file is gone, the rest not yet. A removal (of a node whose BMC
    it never served, say) waits for that to end, then has nothing to do,
    instead of calling the directory somebody else's."""
    driver = sushy.SushyDriver(conf)
    owner = 'tenks:c1:uuid'
    path = driver._dirs.path(owner)
    os.makedirs(os.path.join(path, 'domains'))
    real_locked = driver._dirs.locked

    @contextlib.contextmanager
    def locked():
        with real_locked():
            shutil.rmtree(path, ignore_errors=True)  # the other's removal
            yield
    monkeypatch.setattr(driver._dirs, 'locked', locked)
    assert driver.remove_system('n9', owner) is False


def test_a_removal_keeps_the_emulator_a_new_system_joined(conf,
                                                          monkeypatch):
    """The last system's removal finds, under the emulator's lock, the
    system an ensure served meanwhile: the emulator stays."""
    driver, owner, path = emulator(conf)
    sushy._serve(path, 'n0', 'u0', None)
    real_empty = sushy._empty
    looks = []

    def empty(directory):
        found = real_empty(directory)
        if not looks:
            # Empty as the removal looks without the lock; an ensure
            # serves n1 before it takes it.
            looks.append(found)
            sushy._serve(path, 'n1', 'u1', None)
        return found
    monkeypatch.setattr(sushy, '_empty', empty)
    monkeypatch.setattr(driver, '_remove', lambda p: pytest.fail(
        'the emulator of n1 was removed'))
    assert driver.remove_system('n0', owner) is True
    assert looks == [True]
    assert sushy._all_served(path) == {'n1': 'u1'}


def test_an_emulator_of_one_systems_file_is_upgraded(conf):
    """Before issue 23 an emulator's allow-list was one JSON file."""
    driver, owner, path = emulator(conf)
    daemon_dirs.write(os.path.join(path, 'systems'),
                      json.dumps({'n0': 'u0', 'n1': 'u1'}))
    assert driver.marked()[0]['systems'] == {'n0': 'u0', 'n1': 'u1'}
    assert driver.remove_system('n0', owner) is True
    assert not os.path.exists(os.path.join(path, 'systems'))
    assert sorted(os.listdir(os.path.join(path, 'allowed'))) == ['u1']
    assert driver.marked()[0]['systems'] == {'n1': 'u1'}


def test_the_emulator_configuration_and_htpasswd(tmp_path, conf):
    driver = sushy.SushyDriver(conf)
    path = driver._dirs.path('tenks:c1:uuid')
    assert os.path.basename(path).startswith('c1-')
    assert driver._dirs.path('tenks:c1:other') != path
    settings = driver._settings(path, '127.0.0.1', 9100)
    media_dir = os.path.join(conf.hostagent.pool_dir,
                             'virtual-media.' + os.path.basename(path))
    assert settings == {'address': '127.0.0.1', 'port': 9100,
                        'libvirt_uri': 'qemu:///system',
                        'media_dir': media_dir, 'tls': None}
    config = {}
    exec(driver._config(str(tmp_path), settings), config)
    assert config['SUSHY_EMULATOR_LISTEN_PORT'] == 9100
    assert config['SUSHY_EMULATOR_AUTH_FILE'] == str(tmp_path / 'htpasswd')
    assert isinstance(config['SUSHY_EMULATOR_ALLOWED_INSTANCES'],
                      allowlist.AllowList)
    # sushy-tools' records and downloads stay in the emulator's directory.
    assert config['SUSHY_EMULATOR_STATE_DIR'] == str(tmp_path / 'state')
    assert config['TENKS_DOWNLOAD_DIR'] == str(tmp_path / 'downloads')
    # Virtual media: a CD drive, its media where QEMU can reach them.
    assert config['TENKS_MEDIA_DIR'] == media_dir
    assert list(config['SUSHY_EMULATOR_VMEDIA_DEVICES']) == ['Cd']
    assert 'SUSHY_EMULATOR_SSL_CERT' not in config

    assert driver._ensure_htpasswd(str(tmp_path), 'admin', 'pw') is True
    assert driver._ensure_htpasswd(str(tmp_path), 'admin', 'pw') is False
    text = (tmp_path / 'htpasswd').read_text()
    assert text.startswith('admin:$2b$12$') and 'pw' not in text
    assert os.stat(tmp_path / 'htpasswd').st_mode & 0o777 == 0o600
    assert driver._ensure_htpasswd(str(tmp_path), 'admin', 'new') is True


def test_a_cheaper_htpasswd_hash_is_drift_and_an_ensure_rehashes_it(conf):
    import bcrypt
    driver, owner, path = emulator(conf)
    daemon_dirs.write(os.path.join(path, 'systems'), json.dumps({'n0': UUID}))
    # As Tenks hashed it before issue 19 (bcrypt cost 5).
    cheap = bcrypt.hashpw(b'pw', bcrypt.gensalt(5)).decode()
    daemon_dirs.write(os.path.join(path, 'htpasswd'), 'admin:%s\n' % cheap)
    bmc = {'system_id': UUID, 'address': '127.0.0.1', 'port': 9100,
           'username': 'admin', 'password': 'pw'}
    assert 'credentials' in driver.system_changes(owner, {'n0': bmc})['n0']
    assert driver._ensure_htpasswd(path, 'admin', 'pw') is True
    with open(os.path.join(path, 'htpasswd')) as f:
        assert f.read().startswith('admin:$2b$12$')
    assert 'credentials' not in driver.system_changes(owner,
                                                      {'n0': bmc})['n0']
    assert driver._ensure_htpasswd(path, 'admin', 'pw') is False


def test_tls_needs_both_files(tmp_path, conf):
    cert = tmp_path / 'c.pem'
    cert.write_text('cert')
    conf.set_override('redfish_tls_certificate', str(cert),
                      group='hostagent')
    driver = sushy.SushyDriver(conf)
    path = driver._dirs.path('tenks:c1:uuid')
    with pytest.raises(exceptions.DriverError) as refused:
        driver._settings(path, '127.0.0.1', 9100)
    assert 'go together' in str(refused.value)
    key = tmp_path / 'k.pem'
    key.write_text('key')
    conf.set_override('redfish_tls_key', str(key), group='hostagent')
    first = driver._settings(path, '127.0.0.1', 9100)['tls']
    key.write_text('another key')
    assert driver._settings(path, '127.0.0.1', 9100)['tls'] != first


def test_a_wildcard_address_overlaps_every_other():
    assert sushy._overlap('0.0.0.0', '127.0.0.1')
    assert sushy._overlap('127.0.0.1', '127.0.0.1')
    assert not sushy._overlap('127.0.0.1', '127.0.0.2')
    assert not sushy._overlap(None, '127.0.0.1')


def test_a_mixed_cluster_deploys_and_tears_down(conductor, hypervisor):
    spec = mixed_spec(ipmi=1, redfish=2, redfish_port=9100)
    conductor.deployments.deploy(spec)
    owner = 'tenks:unit:%s' % conductor.db.get_cluster('unit').uuid
    assert hypervisor.names('bmc') == ['ip0']
    assert hypervisor.names('system') == ['rf0', 'rf1']
    assert {v[:3] for k, v in hypervisor.things.items()
            if k[0] == 'system'} == {(owner, '127.0.0.1', 9100)}
    nodes = {n.name: n for n in conductor.db.list_nodes(cluster='unit')}
    assert nodes['rf1'].bmc_system_id == nodes['rf1'].uuid
    # The emulator's port taken by another process: refused at once.
    hypervisor.busy_tcp_ports.add(9101)
    with pytest.raises(exceptions.EndpointInUse):
        conductor.deployments.deploy(dict(spec, redfish_port=9101))
    assert conductor.deployments.deploy(spec)['changed'] == []
    conductor.teardowns.teardown('unit')
    assert hypervisor.names('system') == [] == hypervisor.names('bmc')
