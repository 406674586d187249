"""Several conductors on a jobboard: three tenks-conductor processes on
RabbitMQ, one PostgreSQL state database and a Redis (or ZooKeeper)
jobboard, with two hostagents. Any conductor takes calls; one claims
each operation; when the owner of a running deploy is killed, another
takes its job over and finishes the deploy from its persisted flow."""

import collections
import contextlib
import datetime
import json
import os
import re
import signal
import subprocess
import time

import libvirt
import oslo_messaging as messaging
import pytest

from conductor import rpcapi
from tenks import exceptions
from tenks import policy
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df
from tests.functional import jobboard_fixtures as jf
from tests.functional import openstack_fixtures as of
from tests.functional import shared_db_fixtures as sdb

pytestmark = pytest.mark.functional

ADMIN = policy.admin_context()
CLAIM_EXPIRY = 4


def conductors(tmp_path, jobboard, database, **kwargs):
    """Three conductors and two hostagents on ``jobboard`` and
    ``database``, whose schema is made first."""
    kwargs.setdefault('claim_expiry', CLAIM_EXPIRY)
    deployment = df.Deployment(tmp_path / 'services', conductors=3,
                               jobboard=jobboard, database=database,
                               **kwargs)
    synced = sdb.manage(deployment.conductor.config, 'db', 'sync')
    assert synced.returncode == 0, synced.stderr
    return deployment


def enrolled(env, count):
    return env.spec(
        count=count,
        specs=[{'type': 'small', 'count': count,
                'node_name_prefix': env.node_prefix,
                'ironic_config': {'resource_class': 'tenks-small',
                                  'deploy_interface': 'ramdisk'}}],
        deploy_kernel='http://127.0.0.1:8080/ipa.kernel',
        deploy_ramdisk='http://127.0.0.1:8080/ipa.initramfs')


def domains(env):
    """{domain name: how many} of the cluster's nodes in libvirt."""
    conn = libvirt.open(cf.URI)
    try:
        return collections.Counter(
            d.name() for d in conn.listAllDomains()
            if d.name().startswith(env.node_prefix)
            or env.node_prefix in d.name())
    finally:
        conn.close()


def dead(d):
    """The conductors whose process has died, by host."""
    return [host for host, service in zip(d.conductor_hosts, d.conductors,
                                          strict=True)
            if service.process.poll() is not None]


def assert_complete(d, env, spec, cloud=None):
    """The cluster as deployed once: each node one domain, a BMC that
    answers, one Ironic node (with ``cloud``), and an audit that finds
    nothing amiss."""
    nodes = d.api.list_nodes(ADMIN, env.cluster)
    count = sum(entry['count'] for entry in spec['specs'])
    assert len(nodes) == count
    assert sorted(n['state'] for n in nodes) == ['deployed'] * count
    made = domains(env)
    assert len(made) == count and set(made.values()) == {1}, made
    for node in nodes:
        status = cf.ipmitool(node['bmc_port'], 'power', 'status')
        assert status.returncode == 0, status.stderr
    if cloud is not None:
        ironic = [n for n in cloud.baremetal.nodes(details=True)
                  if n.name and n.name.startswith(env.node_prefix)]
        assert sorted(n.name for n in ironic) == sorted(
            n['name'] for n in nodes)
        assert {n.provision_state for n in ironic} == {'available'}
    # Other tests' things may be there too: none of this cluster's.
    report = d.api.audit(ADMIN)
    assert [(e['name'], e['status'], e['detail'])
            for e in report['drift'] + report['other']
            if e['cluster'] == env.cluster] == []


@pytest.mark.parametrize('jobboard,point,port_base', [
    ('redis', 'bridge:*', 9400), ('redis', 'node:*', 9410),
    ('redis', 'ironic_node:*', 9420), ('zookeeper', 'node:*', 9430)])
def test_another_conductor_finishes_the_deploy_of_one_killed(
        request, tmp_path, openstack_services, cloud, jobboard, point,
        port_base):
    """The conductor that runs a deploy is killed (SIGKILL) once the
    first task matching ``point`` has succeeded: in host set-up, among
    the node tasks, during Ironic enrolment. Another claims the job once
    the claim expires, resumes the flow, and the cluster is whole, with
    nothing made twice."""
    board = request.getfixturevalue('%s_url' % jobboard)
    with sdb.database('postgresql') as url:
        deployment = conductors(tmp_path, board, url,
                                openstack=openstack_services)
        # Every conductor would die so, in a flow it runs from its start:
        # the first to claim the deploy does; the one that resumes it
        # does not.
        deployment.conductor_environ = {'TENKS_FAULT': 'kill:%s' % point}
        with deployment as d:
            env = cf.ClusterEnv(tmp_path / 'cluster', port_base=port_base,
                                state_dirs=d.state_dirs.values())
            try:
                taken_over(d, env, cloud)
            finally:
                left = of.remove_ironic_nodes(cloud, env.node_prefix)
                assert left == [], 'the test left %s behind' % left


def taken_over(d, env, cloud):
    with cf.checked(env):
        spec = enrolled(env, 3)
        operation_id = d.api.deploy_cluster(ADMIN, spec)
        killed_at = None
        deadline = time.monotonic() + 300
        # A question the victim took just before it died gets no answer
        # (a conductor acknowledges a call as it takes it): asked with a
        # short timeout, and again.
        poll = rpcapi.ConductorAPI(d.bus, timeout=2)
        while True:
            assert time.monotonic() < deadline
            if killed_at is None and dead(d):
                killed_at = time.monotonic()
            try:
                operation = poll.get_operation(ADMIN, operation_id)
            except messaging.MessagingTimeout:
                continue
            if operation['state'] != 'running':
                break
            time.sleep(0.2)
        [victim] = dead(d)
        assert operation['state'] == 'succeeded', operation['error']
        assert operation['result']['resumed'] is True
        assert operation['conductor'] not in (victim, None)
        print('taken over and finished %.1f s after the kill'
              % (time.monotonic() - killed_at))
        assert_complete(d, env, spec, cloud)

        gone = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
        assert gone['state'] == 'succeeded', gone['error']


def api_of(d, host):
    """A client of the conductor ``host`` alone."""
    api = rpcapi.ConductorAPI(d.bus, timeout=60)
    api.client = api.client.prepare(server=host)
    return api


def test_a_busy_cluster_is_refused_by_every_conductor(tmp_path, redis_url):
    """While one conductor's deploy of a cluster runs, every conductor
    refuses another operation on it, naming the deploy and its
    conductor; the conductors list themselves, the owner with its job."""
    with sdb.database('postgresql') as url:
        with conductors(tmp_path, redis_url, url) as d:
            env = cf.ClusterEnv(tmp_path / 'cluster', port_base=9440,
                                state_dirs=d.state_dirs.values())
            with cf.checked(env):
                operation_id = api_of(d, d.conductor_hosts[1]).deploy_cluster(
                    ADMIN, env.spec(count=4))
                for host in d.conductor_hosts:
                    with pytest.raises(exceptions.ClusterBusy) as busy:
                        api_of(d, host).teardown_cluster(ADMIN, env.cluster)
                    # Its owner: the conductor that accepted it, until
                    # one claims it.
                    named = re.match(
                        'Cluster %s is busy: deploy %s runs on conductor '
                        '(\\S+); try again' % (env.cluster, operation_id),
                        str(busy.value))
                    assert named and named.group(1) in d.conductor_hosts, (
                        str(busy.value))
                listed = json.loads(d.cli('conductor', 'list', '-f',
                                          'json').stdout)
                assert sorted(c['host'] for c in listed) == sorted(
                    d.conductor_hosts)
                done = d.wait(operation_id)
                assert done['state'] == 'succeeded', done['error']
                gone = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
                assert gone['state'] == 'succeeded', gone['error']


def test_six_clusters_deploy_at_once_over_three_conductors(tmp_path,
                                                           redis_url):
    """Six deploys submitted at once are claimed by the three conductors,
    each cluster whole, none of their BMC ports or MACs given twice."""
    with sdb.database('postgresql') as url:
        with conductors(tmp_path, redis_url, url) as d:
            envs = [cf.ClusterEnv(tmp_path / ('c%d' % n),
                                  port_base=9450 + 10 * n,
                                  state_dirs=d.state_dirs.values())
                    for n in range(6)]
            try:
                specs = [env.spec(count=2) for env in envs]
                operations = [d.api.deploy_cluster(ADMIN, spec)
                              for spec in specs]
                done = [d.wait(op, timeout=600) for op in operations]
                assert [o['state'] for o in done] == ['succeeded'] * 6, [
                    o['error'] for o in done]
                owners = collections.Counter(o['conductor'] for o in done)
                print('deploys per conductor: %s' % dict(owners))
                assert len(owners) >= 2
                nodes = d.api.list_nodes(ADMIN)
                assert len(nodes) == 12
                assert len({n['bmc_port'] for n in nodes}) == 12
                macs = [nic['mac'] for n in nodes for nic in n['nics']]
                assert len(set(macs)) == len(macs)
                for env, spec in zip(envs, specs, strict=True):
                    assert_complete(d, env, spec)
                gone = [d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
                        for env in envs]
                assert [o['state'] for o in gone] == ['succeeded'] * 6
            finally:
                left = []
                for env in envs:
                    left += env.leftovers()
                    env.force_clean()
                assert left == [], 'the test left %s behind' % left


@pytest.mark.parametrize('server,port_base', [('redis', 9510),
                                              ('postgresql', 9520)])
def test_a_server_restarted_during_a_deploy_loses_nothing(
        tmp_path, redis_url, server, port_base):
    """Redis (the jobboard) or PostgreSQL (the state database) stopped
    and started again while a deploy runs on three conductors: they
    reconnect, the deploy's conductor keeps its claim (back within the
    expiry), and the deploy ends once, whole, its job gone from the
    board."""
    restart = {'redis': jf.restart_redis,
               'postgresql': sdb.restart_postgresql}[server]
    with sdb.database('postgresql') as url:
        with conductors(tmp_path, redis_url, url, claim_expiry=20) as d:
            env = cf.ClusterEnv(tmp_path / 'cluster', port_base=port_base,
                                state_dirs=d.state_dirs.values())
            with cf.checked(env):
                spec = env.spec(count=4)
                operation_id = d.api.deploy_cluster(ADMIN, spec)
                deadline = time.monotonic() + 120
                while not domains(env):
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
                owner = d.api.get_operation(ADMIN, operation_id)['conductor']
                restart()
                done = d.wait(operation_id)
                assert done['state'] == 'succeeded', done['error']
                assert (done['conductor'], done['result']['resumed']) == (
                    owner, False)
                assert_complete(d, env, spec)
                # Consumed (by its conductor, or, if Redis was away
                # then, by the next to claim it): no job is left.
                namespace = redis_url.split('namespace=')[1]
                deadline = time.monotonic() + 60
                while jobs_left(namespace):
                    assert time.monotonic() < deadline
                    time.sleep(0.5)
                gone = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
                assert gone['state'] == 'succeeded', gone['error']


def jobs_left(namespace):
    """How many jobs the Redis jobboard of ``namespace`` lists."""
    with contextlib.closing(jf.redis_client()) as client:
        return sum(client.hlen(key) for key in client.scan_iter(
            match='%s.jobs*' % namespace, _type='hash'))


@pytest.mark.parametrize('url', ['redis://:secret@127.0.0.1:9/0',
                                 'zookeeper://127.0.0.1:9/tenks'])
def test_a_conductor_whose_jobboard_does_not_answer_refuses_to_start(
        tmp_path, url):
    with sdb.database('postgresql') as database:
        d = df.Deployment(tmp_path, agents=1, database=database,
                          jobboard=url)
        assert sdb.manage(d.conductor.config, 'db', 'sync').returncode == 0
        started = subprocess.run(
            [os.path.join(cf.BIN, 'tenks-conductor'), '--config-file',
             d.conductor.config], capture_output=True, text=True,
            timeout=120)
    assert started.returncode == 1
    assert started.stderr.startswith(
        'tenks-conductor: not starting: Jobboard %s does not answer: '
        % url.replace('secret', '***'))
    assert 'secret' not in started.stdout + started.stderr
# Found by the fault suite's takeover cases (tests/functional/fault_suite.py)

def test_a_killed_conductor_starts_again(tmp_path, redis_url):
    """A conductor killed (SIGKILL) starts again under its name once its
    heartbeat has expired, as a service manager restarts it, and lists
    itself among the live conductors."""
    with sdb.database('postgresql') as url:
        deployment = df.Deployment(tmp_path / 'services', conductors=2,
                                   jobboard=redis_url, database=url,
                                   claim_expiry=CLAIM_EXPIRY)
        synced = sdb.manage(deployment.conductor.config, 'db', 'sync')
        assert synced.returncode == 0, synced.stderr
        with deployment as d:
            host, service = d.conductor_hosts[1], d.conductors[1]
            service.stop(signal.SIGKILL)
            time.sleep(CLAIM_EXPIRY + 1)
            since = datetime.datetime.now(datetime.timezone.utc)
            service.start()
            # Nobody lists the conductors until it has started (or
            # failed to): a listing would forget the dead one first.
            deadline = time.monotonic() + 60
            while service.process.poll() is None and open(
                    service.log).read().count('started as %s' % host) < 2:
                assert time.monotonic() < deadline, 'it never started'
                time.sleep(0.2)
            assert service.process.poll() is None, (
                'it died as it started: %s' % open(service.log).read()[
                    -300:])
            listed = {c['host']: c for c in api_of(
                d, d.conductor_host).list_conductors(ADMIN)}
            assert datetime.datetime.fromisoformat(
                listed[host]['started_at']) > since, listed


def test_the_renewal_of_an_expired_claim_says_it_is_lost(redis_url):
    """A claim this conductor did not renew in time, and that nobody
    holds now, is lost: renew says so (the job runner then logs it and
    goes on renewing its other jobs and its membership)."""
    from conductor import jobboard
    board = jobboard.Board(jobboard.backend(redis_url, 1), 'cond-a', 1)
    board.connect()
    try:
        board.post('an-operation', 'deploy', 'c', None, [])
        [job] = board.jobs()
        assert board.claim(job)
        time.sleep(1.5)
        assert board.renew(job) is False
    finally:
        board.close()
