"""The audit on fake hypervisors: the record against what is there, the
leftovers of dead deployments (and only those) removed by --clean."""

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import types
import uuid

import pytest
import sqlalchemy as sa

from conductor import audit
from hostagent import audit as hostagent_audit
from hostagent import deployments
from hostagent import nodes
from hostagent.drivers.bmc import processes
from tenks import manage
from tenks import names
from tenks.cloud import nova
from tenks.db import api as db_api
from tests.unit import conftest
from tests.unit.conftest import make_spec

HOST = 'hv1'


def state_database(state_dir, *clusters):
    """A state directory whose state database records ``clusters``
    ([(name, uuid)]), as hostagent.deployments reads one."""
    os.makedirs(state_dir, exist_ok=True)
    with contextlib.closing(sqlite3.connect(os.path.join(
            state_dir, deployments.DATABASE))) as db:
        db.execute('CREATE TABLE tenks_clusters (name, uuid)')
        db.executemany('INSERT INTO tenks_clusters VALUES (?, ?)', clusters)
        db.commit()
    return str(state_dir)


def make_cluster(hv, cluster, prefix):
    """What a deployment of ``cluster`` made on ``hv``: its pool, bridge,
    a node's volume, tap, domain and BMC, with its hostagent's mark;
    returns the deployment's mark."""
    owner = names.owner(cluster, str(uuid.uuid4()))
    mark = names.agent_owner(owner, HOST)
    hv.ensure_marked('pool', 'tenks-' + cluster, mark)
    hv.ensure_marked('bridge', prefix + 'br0', mark)
    hv.ensure_marked('volume', prefix + '0vol0', mark, 1024)
    hv.pools[prefix + '0vol0'] = 'tenks-' + cluster
    hv.ensure_marked('port', 'p-%s0-0' % prefix, mark)
    hv.bridges['p-%s0-0' % prefix] = prefix + 'br0'
    hv.ensure_marked('domain', prefix + '0', mark, {})
    hv.ensure('bmc', prefix + '0', ('127.0.0.1', 7000))
    hv.bmc_owners[prefix + '0'] = mark
    return owner


def made(cluster, prefix):
    """[(kind, name)] of what make_cluster makes."""
    return sorted([('pool', 'tenks-' + cluster), ('bridge', prefix + 'br0'),
                   ('volume', prefix + '0vol0'),
                   ('port', 'p-%s0-0' % prefix), ('domain', prefix + '0'),
                   ('bmc', prefix + '0')])


def left(hv, cluster, prefix):
    """What of make_cluster's ``cluster`` is still on ``hv``."""
    return [thing for thing in made(cluster, prefix) if thing in hv.things]


def statuses(report, key='drift'):
    return sorted((e['kind'], e['name'], e['status']) for e in report[key])


@pytest.fixture
def deployed(conductor, hypervisor):
    conductor.deployments.deploy(make_spec(count=2))
    return conductor


def test_a_deployed_cluster_audits_clean(deployed):
    assert audit.audit(deployed) == {'drift': [], 'other': [], 'removed': []}
    assert audit.audit(deployed, 'unit') == {'drift': [], 'other': [],
                                      'removed': []}


def test_drift_made_by_hand_is_reported(deployed, hypervisor):
    owner = names.owner('unit', deployed.db.get_cluster('unit').uuid)
    del hypervisor.things[('domain', 'tk0')]
    del hypervisor.things[('volume', 'tk1vol0')]
    del hypervisor.things[('port', 'p-tk1-0')]
    hypervisor.stopped_bmcs.add('tk1')
    # Made with the cluster's mark, and in no record.
    hypervisor.ensure_marked('volume', 'stray', names.agent_owner(owner,
                                                                  HOST))
    hypervisor.pools['stray'] = 'tenks-unit'
    report = audit.audit(deployed)
    assert statuses(report) == [
        ('bmc', 'tk1', 'stopped'), ('domain', 'tk0', 'missing'),
        ('port', 'p-tk1-0', 'missing'), ('volume', 'stray', 'unrecorded'),
        ('volume', 'tk1vol0', 'missing')]
    assert {(e['cluster'], e['hypervisor']) for e in report['drift']} == {
        ('unit', HOST)}
    stray = [e for e in report['drift'] if e['name'] == 'stray'][0]
    assert stray['mark'] == names.agent_owner(owner, HOST)
    assert stray['detail'].startswith('in storage pool tenks-unit; ')
    # A live deployment's thing is never a leftover: --clean keeps it.
    assert audit.audit(deployed, clean=True)['removed'] == []
    assert ('volume', 'stray') in hypervisor.things


def test_a_pool_or_bridge_gone_or_replaced(deployed, hypervisor):
    del hypervisor.things[('pool', 'tenks-unit')]
    hypervisor.marks[('bridge', 'brtenks0')] = 'tenks:unit:%s/hv1' % (
        uuid.uuid4())
    assert statuses(audit.audit(deployed)) == [
        ('bridge', 'brtenks0', 'foreign'), ('pool', 'tenks-unit', 'missing')]


def test_leftovers_of_a_dead_deployment_and_only_those_are_cleaned(
        deployed, hypervisor, deployments_dir, tmp_path):
    """A deployment whose state directory is gone, one its state
    directory no longer records: their things go with --clean, with
    their notes. Another state directory's live deployment, one nothing
    proves dead, and what carries no mark stay."""
    gone = make_cluster(hypervisor, 'gone', 'g')
    forgotten = make_cluster(hypervisor, 'forgotten', 'f')
    live = make_cluster(hypervisor, 'live', 'l')
    make_cluster(hypervisor, 'unknown', 'u')
    hypervisor.things[('domain', 'foreign0')] = {}
    other_state = state_database(
        tmp_path / 'other', ('live', live.rpartition(':')[2]))
    for owner, state_dir in ((gone, str(tmp_path / 'deleted')),
                             (forgotten, other_state),
                             (live, other_state)):
        deployments.Registry(deployments_dir, state_dir, HOST).note(owner)

    report = audit.audit(deployed)
    leftovers = sorted((e['kind'], e['name']) for e in report['drift'])
    assert leftovers == sorted(made('gone', 'g') + made('forgotten', 'f'))
    assert {e['status'] for e in report['drift']} == {'leftover'}
    details = {e['cluster']: e['detail'] for e in report['drift']
               if e['kind'] == 'domain'}
    assert details['gone'] == ('deployment dead: its state directory %s is '
                               'gone' % (tmp_path / 'deleted'))
    assert details['forgotten'] == (
        'deployment dead: state directory %s no longer records it'
        % other_state)
    assert {e['cluster'] for e in report['other']} == {'live', 'unknown'}
    assert {e['detail'] for e in report['other']
            if e['kind'] == 'domain'} == {
        'deployment not proven dead: state directory %s records it'
        % other_state,
        'deployment not proven dead: no state directory is noted for it'}

    cleaned = audit.audit(deployed, clean=True)
    assert sorted((e['kind'], e['name']) for e in cleaned['removed']) == (
        leftovers)
    assert {e['status'] for e in cleaned['removed']} == {'removed'}
    assert cleaned['drift'] == []
    assert left(hypervisor, 'gone', 'g') == []
    assert left(hypervisor, 'forgotten', 'f') == []
    assert left(hypervisor, 'live', 'l') == made('live', 'l')
    assert left(hypervisor, 'unknown', 'u') == made('unknown', 'u')
    assert ('domain', 'foreign0') in hypervisor.things
    assert deployments.Registry(deployments_dir, '/', HOST).state_dirs(
        gone) == []
    assert deployments.Registry(deployments_dir, '/', HOST).state_dirs(
        live) == [other_state]
    # The cluster of this conductor was never touched.
    assert audit.audit(deployed, 'unit') == {'drift': [], 'other': [],
                                      'removed': []}


def test_a_hostagent_keeps_what_its_notes_do_not_prove_dead(
        deployed, hypervisor, deployments_dir, tmp_path):
    """Whatever its clean request says: another state directory's live
    deployment, or one nothing is noted for."""
    live = make_cluster(hypervisor, 'live', 'l')
    unknown = make_cluster(hypervisor, 'unknown', 'u')
    deployments.Registry(deployments_dir, state_database(
        tmp_path / 'other', ('live', live.rpartition(':')[2])),
        HOST).note(live)
    done = deployed.agents.request(HOST, 'clean', 'clean-1',
                                   owners=[live, unknown], daemons=[])
    assert (done['removed'], done['changed']) == ([], False)
    assert [why.split(':')[0] for _, _, why in done['failed']] == [
        'not proven dead'] * 2
    assert left(hypervisor, 'live', 'l') == made('live', 'l')
    assert left(hypervisor, 'unknown', 'u') == made('unknown', 'u')


def test_the_audit_of_a_cluster_looks_at_its_name_only(
        deployed, hypervisor, deployments_dir, tmp_path):
    gone = make_cluster(hypervisor, 'gone', 'g')
    deployments.Registry(deployments_dir, str(tmp_path / 'deleted'),
                         HOST).note(gone)
    hypervisor.daemons.append({'kind': 'ipmi host', 'directory': '/x/ipmi',
                               'pids': [99999], 'orphan': 'it is gone'})
    del hypervisor.things[('domain', 'tk0')]
    assert statuses(audit.audit(deployed, 'unit')) == [
        ('domain', 'tk0', 'missing')]
    assert {e['cluster'] for e in audit.audit(deployed, 'gone')['drift']} == {
        'gone'}
    assert audit.audit(deployed, 'gone', clean=True)['removed']
    assert left(hypervisor, 'gone', 'g') == []
    assert hypervisor.daemons
    assert ('domain', 'tk0', 'missing') in statuses(audit.audit(deployed))


def test_orphan_bmc_processes_are_leftovers(deployed, hypervisor):
    """Processes serving a state directory that is gone (or that names
    another as its own) are stopped; those of a live one stay."""
    hypervisor.daemons += [
        {'kind': 'ipmi host', 'directory': '/deleted/state/ipmi',
         'pids': [4001], 'orphan': 'its directory /deleted/state/ipmi is '
                                   'gone'},
        {'kind': 'ipmi host', 'directory': '/other/state/ipmi',
         'pids': [4002], 'orphan': None}]
    report = audit.audit(deployed)
    assert statuses(report) == [
        ('ipmi host', '/deleted/state/ipmi', 'leftover')]
    assert report['drift'][0]['detail'] == (
        'pid 4001: its directory /deleted/state/ipmi is gone')
    assert statuses(report, 'other') == [
        ('ipmi host', '/other/state/ipmi', 'other')]
    cleaned = audit.audit(deployed, clean=True)
    assert statuses(cleaned, 'removed') == [
        ('ipmi host', '/deleted/state/ipmi', 'removed')]
    assert [d['directory'] for d in hypervisor.daemons] == [
        '/other/state/ipmi']


@pytest.fixture
def elsewhere(conf, hypervisor, tmp_path):
    """A conductor whose state database is not in its hostagent's state
    directory (as a distributed one's)."""
    conf.set_override('connection', 'sqlite:///%s' % (
        tmp_path / 'elsewhere.sqlite'), group='database')
    manage.db_sync(conf)
    with conftest.embedded.embedded(conf) as conductor:
        yield conductor


def test_a_deployment_noted_here_only_is_dead_when_unrecorded(
        elsewhere, hypervisor, deployments_dir, conf):
    """Noted by the hostagent's own state directory, which holds no state
    database: this conductor's record decides."""
    elsewhere.deployments.deploy(make_spec(count=1))
    assert audit.audit(elsewhere)['drift'] == []
    gone = make_cluster(hypervisor, 'gone', 'g')
    deployments.Registry(deployments_dir, conf.state_dir, HOST).note(gone)
    report = audit.audit(elsewhere)
    assert {e['status'] for e in report['drift']} == {'leftover'}
    assert report['drift'][0]['detail'] == (
        "deployment dead: noted by this hostagent, whose state directory "
        "%s holds no state database, and this conductor has no record of "
        "it" % conf.state_dir)


def test_the_hostagent_notes_each_deployment_it_makes_things_for(
        deployed, deployments_dir, conf):
    cluster = deployed.db.get_cluster('unit')
    registry = deployments.Registry(deployments_dir, conf.state_dir, HOST)
    assert registry.state_dirs(names.owner('unit', cluster.uuid)) == [
        conf.state_dir]
    assert registry.verdict(names.owner('unit', cluster.uuid)) == (
        'live', 'state directory %s records it' % conf.state_dir)


def test_clean_forgets_the_notes_of_ended_deployments(
        deployed, deployments_dir, conf):
    registry = deployments.Registry(deployments_dir, conf.state_dir, HOST)
    [owner] = registry.owners()
    audit.audit(deployed, clean=True)
    assert registry.owners() == {owner}
    deployed.teardowns.teardown('unit')
    assert registry.owners() == {owner}
    assert audit.audit(deployed, clean=True) == {'drift': [], 'other': [],
                                          'removed': []}
    assert registry.owners() == set()


@pytest.mark.parametrize('how,verdict', [
    ('gone', 'dead'), ('forgotten', 'dead'), ('recorded', 'live'),
    ('own without database', 'here'), ('without database', 'unknown'),
    ('unreadable', 'unknown'), ('never noted', 'unknown'),
    ('recorded and gone', 'live')])
def test_what_the_notes_prove(tmp_path, how, verdict):
    owner = names.owner('c1', str(uuid.uuid4()))
    directory, state = str(tmp_path / 'notes'), tmp_path / 'state'
    registry = deployments.Registry(directory, str(tmp_path / 'own'), HOST)
    if how in ('forgotten', 'recorded', 'recorded and gone'):
        state_database(state, *[('c1', owner.rpartition(':')[2])] * (
            how != 'forgotten'))
    elif how == 'own without database':
        state = tmp_path / 'own'
    elif how == 'unreadable':
        state.mkdir()
        (state / deployments.DATABASE).write_text('not a database')
    if how != 'gone':
        state.mkdir(exist_ok=True)
    if how != 'never noted':
        deployments.Registry(directory, str(state), HOST).note(owner)
    if how == 'recorded and gone':
        deployments.Registry(directory, str(tmp_path / 'gone'),
                             HOST).note(owner)
    assert registry.verdict(owner)[0] == verdict


def test_a_tap_that_is_an_open_vswitch_port_is_one_thing():
    class Network:
        def __init__(self, found):
            self.found = found

        def marked(self):
            return [dict(thing) for thing in self.found]

    tap = {'kind': 'port', 'name': 't0', 'mark': 'tenks:c:u', 'master': None}
    networks = {'linuxbridge': Network([tap]), 'openvswitch': Network([
        tap, {'kind': 'ovs port', 'name': 't0', 'mark': 'tenks:c:u',
              'bridge': 'ovsbr'},
        {'kind': 'ovs port', 'name': 'patch0', 'mark': 'tenks:c:u',
         'bridge': 'ovsbr'}])}
    nothing = Network([])
    found = hostagent_audit.Audit(nothing, networks, nothing, nothing,
                                  None, nothing).things()
    assert found == [
        {'kind': 'ovs port', 'name': 'patch0', 'mark': 'tenks:c:u',
         'bridge': 'ovsbr'},
        {'kind': 'port', 'name': 't0', 'mark': 'tenks:c:u',
         'master': 'ovsbr', 'bridge_type': 'openvswitch'}]


def test_the_drivers_of_a_hypervisor_are_read_at_once():
    # Each reads libvirt, the kernel, OVSDB or processes: a slow one
    # does not hold the others up.
    everyone = threading.Barrier(9, timeout=5)

    class Driver:
        def marked(self):
            everyone.wait()
            return []

        def daemons(self):
            everyone.wait()
            return []

    registry = types.SimpleNamespace(state_dir='/nowhere')
    survey = hostagent_audit.Audit(
        Driver(), {'linuxbridge': Driver(), 'openvswitch': Driver()},
        Driver(), Driver(), registry, Driver()).survey()
    assert (survey['things'], survey['daemons']) == ([], [])


def test_a_hypervisors_survey_and_node_inspections_are_asked_at_once(
        deployed, monkeypatch):
    # The hostagent's survey and its inspection of the recorded nodes
    # overlap: the audit waits for the slower, not for both in turn.
    both = threading.Barrier(2, timeout=5)

    def meeting(original):
        def waiting(*args, **kwargs):
            both.wait()
            return original(*args, **kwargs)
        return waiting

    for cls, method in ((hostagent_audit.Audit, 'survey'),
                        (nodes.Nodes, 'inspect')):
        monkeypatch.setattr(cls, method, meeting(getattr(cls, method)))
    assert audit.audit(deployed) == {'drift': [], 'other': [], 'removed': []}


def ironic_node(**fields):
    node = dict(name='tk0', driver='ipmi', resource_class='gold',
                properties={'cpus': 1}, conductor_group='', shard=None,
                traits=['CUSTOM_A'], driver_info={
                    'ipmi_address': '127.0.0.1', 'ipmi_port': 6230,
                    'ipmi_username': 'admin', 'ipmi_password': '******',
                    'deploy_kernel': 'k'})
    node.update(fields)
    return types.SimpleNamespace(**node)


def test_an_ironic_node_is_compared_with_its_record():
    view = {'ironic': {'fields': {'name': 'tk0', 'driver': 'ipmi',
                                  'resource_class': 'gold',
                                  'properties': {'cpus': 1}},
                       'traits': ['CUSTOM_A']},
            'bmc': {'type': 'ipmi', 'address': '127.0.0.1', 'port': 6230,
                    'username': 'admin'},
            'record': {'nics': [{'mac': '52:54:00:00:00:01',
                                 'physnet': 'physnet1'}]}}
    spec = {'ipmi_password': 'secret'}
    port = types.SimpleNamespace(address='52:54:00:00:00:01',
                                 physical_network='physnet1')
    assert audit.ironic_changes(ironic_node(), [port], view, spec) == []
    other = types.SimpleNamespace(address='52:54:00:00:00:02',
                                  physical_network='physnet1')
    assert audit.ironic_changes(
        ironic_node(resource_class='silver', traits=[],
                    driver_info={'ipmi_address': '127.0.0.1',
                                 'ipmi_port': 6231}),
        [other], view, spec) == [
        'resource_class', 'traits', 'driver_info ipmi_port',
        'driver_info ipmi_username', 'port 52:54:00:00:00:01 missing',
        'port 52:54:00:00:00:02 unrecorded']


def test_a_flavor_is_compared_with_its_spec():
    extra = {'resources:CUSTOM_GOLD': '1'}
    conn = types.SimpleNamespace(compute=types.SimpleNamespace(
        fetch_flavor_extra_specs=lambda flavor: types.SimpleNamespace(
            extra_specs=flavor.extra)))
    wanted = {'name': 'gold', 'vcpus': 1, 'ram': 128, 'disk': 0,
              'extra_specs': extra}
    flavor = types.SimpleNamespace(vcpus=1, ram=128, disk=0, extra=extra)
    assert nova.flavor_changes(conn, flavor, wanted) == []
    flavor = types.SimpleNamespace(vcpus=2, ram=128, disk=0,
                                   extra={'trait:X': 'required'})
    assert nova.flavor_changes(conn, flavor, wanted) == [
        'vcpus', 'extra spec resources:CUSTOM_GOLD', 'extra spec trait:X']


@pytest.fixture
def daemon(tmp_path):
    """A process marked as serving ``tmp_path/'dir'``, with a child (it
    inherits the mark)."""
    directory = tmp_path / 'dir'
    directory.mkdir()
    proc = subprocess.Popen(
        [sys.executable, '-c', 'import subprocess, sys; subprocess.run('
         '[sys.executable, "-c", "import time; time.sleep(60)"])'],
        env=dict(os.environ, TENKS_TEST_DAEMON=str(directory)))
    try:
        assert processes.poll(lambda: len(processes.marked_by(
            'TENKS_TEST_DAEMON').get(str(directory), ())) == 2, 10)
        yield directory, proc.pid
    finally:
        for pid in processes.marked_by('TENKS_TEST_DAEMON').get(
                str(directory), ()):
            os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_a_process_is_an_orphan_unless_its_directory_names_it(daemon):
    directory, pid = daemon
    [pids] = [found for path, found in processes.marked_by(
        'TENKS_TEST_DAEMON').items() if path == str(directory)]
    assert pid in pids
    assert processes.orphans(str(directory), 'pid', pids) == (
        pids, '%s names none' % (directory / 'pid'))
    (directory / 'pid').write_text('1')
    assert processes.orphans(str(directory), 'pid', pids) == (
        pids, '%s names another process' % (directory / 'pid'))
    # Its child serves it too.
    (directory / 'pid').write_text(str(pid))
    assert processes.orphans(str(directory), 'pid', pids) == (set(), None)
    assert processes.orphans(str(directory / 'gone'), 'pid', pids) == (
        pids, 'its directory %s is gone' % (directory / 'gone'))


def test_what_was_asked_for_and_never_made_is_not_missing(deployed,
                                                          hypervisor):
    """Records 'creating' (a request unanswered, or answered with an
    error: a rollback that could not remove what it may have made keeps
    them) of things that are not there: never made, so no drift; once
    confirmed 'present', the same is missing (found by the fault suite:
    libvirtd stopped during a deploy)."""
    db = deployed.db
    tk1 = [n.uuid for n in db.list_nodes() if n.name == 'tk1'][0]
    for kind, name in (('domain', 'tk1'), ('volume', 'tk1vol0'),
                       ('pool', 'tenks-unit')):
        del hypervisor.things[(kind, name)]
    with db.engine.begin() as conn:
        conn.execute(sa.update(db_api.RESOURCES).where(
            db_api.RESOURCES.c.node == tk1).values(state='creating'))
        conn.execute(sa.update(db_api.RESOURCES).where(
            db_api.RESOURCES.c.kind == 'pool').values(state='creating'))
    assert audit.audit(deployed)['drift'] == []
    with db.engine.begin() as conn:
        conn.execute(sa.update(db_api.RESOURCES).values(state='present'))
    assert statuses(audit.audit(deployed)) == [
        ('domain', 'tk1', 'missing'), ('pool', 'tenks-unit', 'missing'),
        ('volume', 'tk1vol0', 'missing')]
