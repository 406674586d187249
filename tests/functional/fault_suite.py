"""The fault-injection suite (conductor.faults): an operation of a
throw-away cluster run with one fault, then checked.

An Operation takes the cluster from its old state to its new one (a
deploy, a grow, a shrink, a teardown). Its reference run, without fault,
gives its tasks, as the compiled flow lists them, and the new cluster.
Each case prepares the old cluster, then runs the operation with one
fault:

- ``fail:<task>``: in this process, the task's hostagent answer (or its
  result) replaced by an error: the operation fails and rolls back;
- ``kill:<k>``: ``tenks`` SIGKILLed once k tasks have ended; then run
  again, it resumes.

Then: the audit finds no drift (nothing leaked or duplicated: nothing
unrecorded, nothing missing but what a failed removal, which is not
undone, kept recorded), the cluster is the old or the new one (a failed
removal may leave it between: the error says so), nothing of another
deployment or unmarked is touched; run again, the operation gives the
new cluster and a clean audit. A case ends with a teardown that leaves
nothing.
"""

import contextlib
import datetime
import os
import re
import signal
import subprocess
import time

import libvirt
import oslo_messaging as messaging
import sqlalchemy as sa
import yaml
from pyroute2 import IPRoute
from taskflow import states as tf_states

from conductor import audit as audits
from conductor import faults
from conductor import jobboard
from conductor import rpcapi as conductor_rpcapi
from tenks import exceptions
from tenks import rpc
from tenks import states
from tenks.cli import embedded
from tenks.db import api as db_api
from tenks.db import flow_tables
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df
from tests.functional import jobboard_fixtures as jf
from tests.functional import libvirt_fixtures as lf
from tests.functional import shared_db_fixtures as sdb

UUID = re.compile('[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                  '[0-9a-f]{12}')
FAIL = 'fail'
KILL = 'kill'
TAKEOVER = 'takeover'
TOKEN = '{token}'


def token(env):
    """What makes ``env``'s names its own: its cluster's, nodes' and
    bridges' names each hold it."""
    return env.cluster.split('-', 1)[1]


def generic(value, env):
    """``value`` (a snapshot, a task name) with ``env``'s token as
    TOKEN, to compare with another cluster's."""
    if isinstance(value, str):
        return value.replace(token(env), TOKEN)
    if isinstance(value, (list, tuple)):
        return type(value)(generic(item, env) for item in value)
    if isinstance(value, dict):
        return {key: generic(item, env) for key, item in value.items()}
    return value


def pattern(task, env):
    """A task name of ``env``'s operation with its node UUIDs as
    wildcards (new nodes get new UUIDs, and one node's task fails as
    another's), generic (see ``generic``)."""
    return generic(UUID.sub('*', task), env)


def cases(tasks, kinds=(FAIL, KILL)):
    """The cases of an operation whose reference run had ``tasks`` (as
    patterns): a failure of each task, a kill at each boundary, a
    takeover after a kill at each boundary."""
    found = []
    if FAIL in kinds:
        found += [(FAIL, p) for p in dict.fromkeys(tasks)]
    for kind in (KILL, TAKEOVER):
        if kind in kinds:
            found += [(kind, k) for k in range(len(tasks) + 1)]
    return found


def snapshot(env, state_dir=None, ports=True, url=None):
    """``env``'s cluster as its conductor (of ``state_dir``, default
    ``env``'s; or of the state database at ``url``) records it, without
    what differs from one run to the next (UUIDs, MACs; ``ports`` False:
    BMC ports, which a move takes among those free then): None if there
    is none. The audit proves the record is what exists."""
    if url is None:
        state_dir = state_dir or env.state_dir
        if not os.path.exists(os.path.join(state_dir, 'state.sqlite')):
            return None
        url = db_api.default_url(state_dir)
    db = db_api.StateDB(db_api.create_engine(url))
    try:
        record = db.get_cluster(env.cluster)
        if record is None:
            return None
        nodes = [n.as_dict() for n in db.list_nodes(cluster=env.cluster)]
        names = {n['uuid']: n['name'] for n in nodes}
        resources = sorted(
            (r.hypervisor, r.kind, names.get(r.name, r.name), r.state)
            for r in db.list_resources(env.cluster))
        running = [o.id for o in db.list_operations(
            env.cluster, state=states.OPERATION_RUNNING)]
    finally:
        db.engine.dispose()
    return generic({
        'state': record.state,
        'nodes': sorted((
            n['name'], n['hypervisor'], n['state'], n['vcpus'],
            n['memory_mb'], n['bmc_port'] if ports else None,
            [v['name'] for v in n['volumes']],
            [(nic['bridge'], nic['tap']) for nic in n['nics']])
            for n in nodes),
        'resources': resources,
        'running operations': running,
    }, env)


class Operation:
    """A deploy of ``after`` nodes on ``before`` (None: no cluster);
    ``after`` None: a teardown."""

    def __init__(self, name, before, after):
        self.name = name
        self.before = before
        self.after = after

    def spec(self, env, count):
        return env.spec(count=count,
                        physnet_mappings={'physnet1': env.uplink})

    def prepare(self, env):
        if self.before is not None:
            env.deploy(self.spec(env, self.before))

    def run(self, env):
        if self.after is None:
            return env.teardown()
        return env.deploy(self.spec(env, self.after))

    def command(self, env):
        """The ``tenks`` arguments that run it."""
        if self.after is None:
            return ['teardown', env.cluster]
        path = os.path.join(env.state_dir + '-specs', '%d.yaml' % self.after)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            yaml.safe_dump(self.spec(env, self.after), f)
        return ['deploy', path]


OPERATIONS = {op.name: op for op in (
    Operation('deploy', None, 2), Operation('grow', 1, 2),
    Operation('shrink', 2, 1), Operation('teardown', 2, None))}


class Bystanders:
    """What a case must leave alone: another deployment's cluster (of
    another state directory) on the same hypervisor, and an unmarked
    domain and bridge named as the case's cluster names its own."""

    def __init__(self, tmp_path, port_base):
        self.other = cf.ClusterEnv(tmp_path / 'bystander', port_base)
        self.tmp_path = tmp_path

    def __enter__(self):
        try:
            self.other.deploy(self.other.spec(count=1))
            self.seen = self.inventory()
        except BaseException:
            self.other.force_clean()
            raise
        return self

    def inventory(self):
        """The bystander cluster's things, its record and its audit."""
        with embedded.embedded(self.other.conf) as conductor:
            audit = audits.audit(conductor, self.other.cluster)
        return (self.other.leftovers(), snapshot(self.other),
                audit['drift'])

    def unmarked(self, env):
        """Make the unmarked things of ``env`` (a case's): a domain named
        as its nodes, and the bridge its physnet is mapped to; returns
        a check that they are still there, as made."""
        domain = env.node_name(9)
        conn = libvirt.open(cf.URI)
        try:
            conn.defineXML(
                "<domain type='qemu'><name>%s</name><memory unit='MiB'>64"
                "</memory><os><type arch='x86_64'>hvm</type></os></domain>"
                % domain)
            uuid = conn.lookupByName(domain).UUIDString()
        finally:
            conn.close()
        with IPRoute() as ipr:
            ipr.link('add', ifname=env.uplink, kind='bridge')

        def check(final=False):
            """``final``: once the case's cluster is gone, the bridge
            must have no port left either."""
            conn = libvirt.open(cf.URI)
            try:
                assert conn.lookupByName(domain).UUIDString() == uuid, \
                    'the unmarked domain %s was replaced' % domain
            finally:
                conn.close()
            ports = os.listdir('/sys/class/net/%s/brif' % env.uplink)
            assert not final or ports == [], 'bridge %s keeps ports %s' % (
                env.uplink, ports)
        return check

    def check(self):
        assert self.inventory() == self.seen, (
            'the bystander deployment changed')

    def __exit__(self, *exc):
        try:
            self.other.teardown()
        finally:
            left = self.other.leftovers()
            self.other.force_clean()
        assert left == [], 'the bystander left %s' % left


class CaseEnv(cf.ClusterEnv):
    """A case's cluster; its physnet is mapped to an unmarked bridge."""

    def __init__(self, tmp_path, port_base, state_dirs=()):
        super().__init__(tmp_path, port_base, state_dirs)
        self.uplink = self.bridge_prefix + 'u'

    def leftovers(self):
        # The unmarked things are the case's own to remove.
        return [thing for thing in super().leftovers()
                if thing not in ('domain %s' % self.node_name(9),
                                 'link %s' % self.uplink)]


def drift(env, removing=()):
    """The audit's drift of ``env``'s cluster, but for what a failed
    removal kept recorded (``removing``: names of things it removed)."""
    with embedded.embedded(env.conf) as conductor:
        report = audits.audit(conductor, env.cluster)
    return [e for e in report['drift']
            if not (e['status'] == 'missing'
                    and generic(e['name'], env) in removing)]


def tenks(env, *args, fault=None, timeout=300):
    environ = dict(os.environ, TENKS_TRANSPORT_URL='')
    environ.pop(faults.ENV, None)
    if fault is not None:
        environ[faults.ENV] = fault
    return subprocess.run([cf.TENKS, '--state-dir', env.state_dir, *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=environ)


class Reference:
    """The reference run of an operation: its tasks and the new
    cluster (None: none)."""

    def __init__(self, operation, tmp_path, port_base):
        env = CaseEnv(tmp_path, port_base)
        recorder = faults.Fault()
        try:
            with IPRoute() as ipr:
                ipr.link('add', ifname=env.uplink, kind='bridge')
            operation.prepare(env)
            faults.install(recorder)
            try:
                operation.run(env)
            finally:
                faults.install(None)
            self.tasks = [pattern(task, env) for task in recorder.tasks]
            self.new = snapshot(env)
            if operation.after is not None:
                env.teardown()
        finally:
            left = env.leftovers()
            env.force_clean()
            with IPRoute() as ipr, contextlib.suppress(Exception):
                ipr.link('del', ifname=env.uplink)
        assert left == [], 'the reference run left %s' % left


def run_case(operation, reference, kind, argument, tmp_path, port_base,
             bystanders):
    """Run one case; returns its outcome ('rolled back', 'resumed'...);
    AssertionError when a check fails."""
    env = CaseEnv(tmp_path, port_base)
    try:
        unmarked = bystanders.unmarked(env)
        outcome = _case(env, unmarked, operation, reference, kind, argument,
                        bystanders)
    except BaseException:
        env.force_clean()
        _remove_unmarked(env)
        raise
    left = env.leftovers()
    env.force_clean()
    _remove_unmarked(env)
    assert left == [], 'the case left %s' % left
    return outcome


def _case(env, unmarked, operation, reference, kind, argument, bystanders):
    operation.prepare(env)
    old = snapshot(env)
    if kind == FAIL:
        outcome, removing = _fail(operation, env, argument.replace(
            TOKEN, token(env)), old, reference.new)
        found = drift(env, removing)
        assert found == [], 'drift after the fault: %s' % found
    else:
        _kill(operation, env, argument)
        outcome = 'done when killed'
    unmarked()
    bystanders.check()
    if snapshot(env) != reference.new:
        started = time.monotonic()
        result = operation.run(env)
        if kind == KILL:
            outcome = '%s in %.1f s' % (
                'resumed' if result.get('resumed') else 'run again',
                time.monotonic() - started)
    assert snapshot(env) == reference.new, (
        'run again: %s, not the new cluster %s' % (
            snapshot(env), reference.new))
    found = drift(env)
    assert found == [], 'drift after the re-run: %s' % found
    if reference.new is not None:
        env.teardown()
    assert env.nodes() == []
    unmarked(final=True)
    return outcome


def _fail(operation, env, task, old, new):
    """Fail ``task``; (outcome, names of what a failed removal kept)."""
    fault = faults.Fault(fail=task)
    faults.install(fault)
    try:
        operation.run(env)
    except exceptions.OperationFailed as e:
        error = str(e)
    else:
        raise AssertionError('no task matched %s' % task)
    finally:
        faults.install(None)
    assert 'Injected fault' in error, error
    now = snapshot(env)
    if now == old:
        return 'rolled back', ()
    if now == new:
        # A teardown's last task: what it failed to do was forget.
        return 'done', ()
    # Removals are not undone: the error says what went.
    assert fault.failed.startswith('remove'), (
        'after %s: %s, neither the old %s nor the new %s' % (
            error, now, old, new))
    assert 'run the' in error, error
    return 'partial', _removing(now, new)


def _removing(now, new):
    """Names of the things recorded in ``now`` (a snapshot) that the
    new cluster has not: what a failed removal kept recorded."""
    kept = {r[:3] for r in new['resources']} if new else set()
    return {name for host, kind, name, _ in now['resources']
            if (host, kind, name) not in kept}


def _kill(operation, env, boundary):
    done = tenks(env, *operation.command(env), fault='kill:%d' % boundary)
    assert done.returncode == -9, (
        'not killed at boundary %d (exit %d): %s' % (
            boundary, done.returncode, done.stdout + done.stderr))


def _remove_unmarked(env):
    cf.remove_libvirt_things(cf.URI, lambda name: name == env.node_name(9))
    with IPRoute() as ipr, contextlib.suppress(Exception):
        ipr.link('del', ifname=env.uplink)


# Host maintenance, on the real bus

class TwoHosts:
    """A conductor and two hostagents on RabbitMQ, which they reach
    through a proxy (so that the broker can restart under them), hvb on
    a libvirtd of its own, both in one aggregate: host maintenance moves
    the nodes of hva to hvb."""

    def __init__(self, tmp_path, agent_timeout=8):
        self.tmp = tmp_path
        self.proxy = df.BrokerProxy()
        self.stack = contextlib.ExitStack()
        self.agent_timeout = agent_timeout

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.stack.close()
            raise
        return self

    def _start(self):
        self.proxy.start()
        self.stack.callback(self.proxy.stop)
        # Everything in that libvirtd is the tests'.
        self.uri_b = self.stack.enter_context(lf.private_libvirtd(
            self.tmp / 'libvirt-b', lambda name: True))
        proxy = self.proxy

        class Proxied(df.Deployment):
            def service_url(self, host):
                return proxy.url(self.url)

        d = self.d = Proxied(self.tmp / 'deployment',
                             agent_timeout=self.agent_timeout,
                             agent_retries=1)
        self.hva, self.hvb = d.hosts
        with open(d.agent(self.hvb).config, 'a') as f:
            f.write('libvirt_uri = %s\npool_dir = %s\n' % (
                self.uri_b, self.tmp / 'pool-b'))
        self.stack.enter_context(d)
        self.api = d.api
        self.state_dir = str(self.tmp / 'deployment' / d.conductor_host)
        self.aggregate = self.api.create_aggregate(
            df.ADMIN, 'faults-%s' % d.token)['uuid']
        self.stack.callback(lambda: self.api.delete_aggregate(
            df.ADMIN, self.aggregate))
        for host in d.hosts:
            self.api.add_aggregate_host(df.ADMIN, self.aggregate, host)
            self.stack.callback(self._leave, host)

    def _leave(self, host):
        # Only a disabled host leaves its aggregates.
        self.api.update_hypervisor(df.ADMIN, host, False)
        self.api.remove_aggregate_host(df.ADMIN, self.aggregate, host)
        self.api.update_hypervisor(df.ADMIN, host, True)

    def __exit__(self, *exc):
        self.stack.close()

    def env(self, tmp_path, port_base):
        """A cluster of these hosts."""
        env = cf.ClusterEnv(tmp_path, port_base,
                            state_dirs=self.d.state_dirs.values())
        env.uris.append(self.uri_b)
        return env

    def restart_conductor(self, fault=None):
        """Start the conductor again (stopped first, unless it has died),
        with ``fault`` in its TENKS_FAULT."""
        self.d.conductor.stop()
        since = datetime.datetime.now(datetime.timezone.utc)
        self.d.conductor.start(**({faults.ENV: fault} if fault else {}))
        # (hva may be in maintenance)
        self.d.wait_for_agents(self.d.hosts, since=since,
                               states={'up', 'maintenance', 'disabled'})

    def restart_broker(self):
        """What the services see of a RabbitMQ restart: every connection
        lost, and every queue and message (none is durable)."""
        self.proxy.stop()
        df.rabbitmqctl('delete_vhost', self.d.vhost)
        df.rabbitmqctl('add_vhost', self.d.vhost)
        self.d.grant()
        since = datetime.datetime.now(datetime.timezone.utc)
        self.proxy.start()
        # The test's own client, whose reply queue went too: a new one
        # (the CLI follows its operations through such an outage), once
        # the services are back (a call sent before the conductor's
        # queue is there again is lost).
        self.d.bus.cleanup()
        self.d.bus = rpc.Bus(self.d.bus.conf, url=self.d.url)
        self.api = self.d.api = conductor_rpcapi.ConductorAPI(self.d.bus,
                                                              timeout=60)
        self.d.wait_for_agents(self.d.hosts, since=since,
                               states={'up', 'maintenance', 'disabled'})

    def deploy(self, spec):
        operation = self.d.wait(self.api.deploy_cluster(df.ADMIN, spec))
        assert operation['state'] == 'succeeded', operation['error']

    def teardown(self, env):
        operation = self.d.wait(self.api.teardown_cluster(df.ADMIN,
                                                          env.cluster))
        assert operation['state'] == 'succeeded', operation['error']

    def drift(self, env, removing=()):
        report = self.api.audit(df.ADMIN, env.cluster)
        return [e for e in report['drift']
                if not (e['status'] == 'missing'
                        and generic(e['name'], env) in removing)]

    def tasks(self, operation_id):
        """The names of the tasks of an operation's flow, as saved."""
        return saved_tasks(db_api.default_url(self.state_dir), operation_id)


def saved_tasks(url, operation_id):
    """The names of the tasks of an operation's flow, as saved in the
    state database at ``url``."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return sorted(name for name in conn.execute(
                sa.select(flow_tables.ATOMS.c.name).where(
                    flow_tables.ATOMS.c.parent_uuid.in_(
                        sa.select(flow_tables.FLOWS.c.uuid).where(
                            flow_tables.FLOWS.c.parent_uuid
                            == operation_id)))).scalars()
                # TaskFlow's own atom, which holds the flow's inputs.
                if not name.startswith('_TaskFlow_'))
    finally:
        engine.dispose()


def moved(env, hosts):
    """The snapshot of a cluster of ``hosts`` (see TwoHosts)."""
    return snapshot(env, hosts.state_dir, ports=False)


class Maintenance:
    """Host maintenance of hva: its two nodes (with a NIC each, so that
    a bridge goes with them) move to hvb."""

    name = 'maintenance'

    def prepare(self, hosts, env):
        api = hosts.api
        api.update_hypervisor(df.ADMIN, hosts.hvb, False, 'not yet')
        try:
            hosts.deploy(env.spec(count=2))
        finally:
            api.update_hypervisor(df.ADMIN, hosts.hvb, True)

    def start(self, hosts):
        """Start it; the ids of its move operations."""
        return hosts.api.start_host_maintenance(df.ADMIN, hosts.hva)[
            'operations']

    def run(self, hosts):
        """Run it and wait; (the error of a move that failed, or None,
        the warnings of those that succeeded)."""
        warnings = []
        for operation_id in self.start(hosts):
            operation = hosts.d.wait(operation_id)
            if operation['state'] != 'succeeded':
                return operation['error'], warnings
            warnings += operation['result']['warnings']
        return None, warnings

    def end(self, hosts, env):
        hosts.teardown(env)
        hosts.api.stop_host_maintenance(df.ADMIN, hosts.hva)


class MaintenanceReference:
    """The reference run of host maintenance: its tasks (as patterns)
    and the new cluster."""

    def __init__(self, hosts, tmp_path, port_base):
        operation = Maintenance()
        env = hosts.env(tmp_path, port_base)
        try:
            operation.prepare(hosts, env)
            [operation_id] = operation.start(hosts)
            state = hosts.d.wait(operation_id)
            assert state['state'] == 'succeeded', state['error']
            self.tasks = [pattern(task, env) for task in hosts.tasks(
                operation_id)]
            self.new = moved(env, hosts)
            operation.end(hosts, env)
        except BaseException:
            _recover(hosts, env)
            raise
        left = env.leftovers()
        env.force_clean()
        assert left == [], 'the reference run left %s' % left


def run_maintenance_case(hosts, reference, kind, argument, tmp_path,
                         port_base):
    """A case of host maintenance (see run_case): the fault in the
    conductor's process, which is started again after it. A failed move
    leaves the nodes that moved at hvb, the others whole at hva."""
    operation = Maintenance()
    env = hosts.env(tmp_path, port_base)
    try:
        operation.prepare(hosts, env)
        old = moved(env, hosts)
        if kind == FAIL:
            hosts.restart_conductor('fail:' + argument.replace(
                TOKEN, token(env)))
            try:
                error, warnings = operation.run(hosts)
            finally:
                hosts.restart_conductor()
            now = moved(env, hosts)
            outcome = ('rolled back' if now == old else 'done'
                       if now == reference.new else 'partial')
            if error is None:
                # A node's removal from its old host failed after it
                # moved (flows.move.RetireNode): a warning, its old parts
                # kept recorded, for the teardown to remove.
                [error] = warnings
                assert 'a teardown removes them' in error, error
                outcome = 'moved, old parts kept'
            assert error and 'Injected fault' in error, error
            removing = _removing(now, reference.new)
            found = hosts.drift(env, removing)
            assert found == [], 'drift after the fault: %s' % found
        else:
            hosts.restart_conductor('kill:%d' % argument)
            ids = operation.start(hosts)
            assert hosts.d.conductor.process.wait(120) == -9, (
                'not killed at boundary %d' % argument)
            started = time.monotonic()
            hosts.restart_conductor()
            for operation_id in ids:
                state = hosts.d.wait(operation_id)
                assert state['state'] == 'succeeded', state['error']
            outcome = 'resumed in %.1f s' % (time.monotonic() - started)
        if outcome != 'moved, old parts kept':
            if moved(env, hosts) != reference.new:
                error, _ = operation.run(hosts)
                assert error is None, error
            assert moved(env, hosts) == reference.new, (
                'run again: %s, not the new cluster %s' % (
                    moved(env, hosts), reference.new))
            found = hosts.drift(env)
            assert found == [], 'drift after the re-run: %s' % found
        operation.end(hosts, env)
    except BaseException:
        _recover(hosts, env)
        raise
    left = env.leftovers()
    env.force_clean()
    assert left == [], 'the case left %s' % left
    return outcome


def _recover(hosts, env):
    """After a maintenance case failed or was interrupted: its cluster
    removed, and for the next case a conductor without a fault (the
    case's may be dead, or still armed) and hva back in service."""
    with contextlib.suppress(Exception):
        hosts.restart_conductor()
    with contextlib.suppress(Exception):
        hosts.api.stop_host_maintenance(df.ADMIN, hosts.hva)
    with contextlib.suppress(Exception):
        hosts.teardown(env)
    env.force_clean()


# Conductor takeover: several conductors on a jobboard

class Conductors:
    """Three conductors (``count``) that share a jobboard (on ``backend``:
    redis or zookeeper) and a PostgreSQL state database, on RabbitMQ, with
    two hostagents; a conductor's claim of a job expires ``claim_expiry``
    s after it dies.

    The first conductor is the victim of the takeover cases: started
    with the case's fault, it alone claims the case's operation (the
    others are paused with SIGSTOP while it does), and dies running it;
    one of the others (the standbys) takes the job over. Between cases
    it stays down: the standbys do the rest."""

    NAMESPACES = {'redis': jf.redis_namespace,
                  'zookeeper': jf.zookeeper_namespace}

    def __init__(self, tmp_path, count=3, claim_expiry=4, backend='redis'):
        self.tmp = tmp_path
        self.count = count
        self.backend = backend
        self.claim_expiry = claim_expiry
        self.stack = contextlib.ExitStack()

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.stack.close()
            raise
        return self

    def _start(self):
        board_url = self.stack.enter_context(
            self.NAMESPACES[self.backend]())
        self.url = self.stack.enter_context(sdb.database('postgresql'))
        d = self.d = df.Deployment(
            self.tmp / 'deployment', conductors=self.count,
            jobboard=board_url, database=self.url,
            claim_expiry=self.claim_expiry)
        synced = sdb.manage(d.conductor.config, 'db', 'sync')
        assert synced.returncode == 0, synced.stderr
        self.stack.enter_context(d)
        self.board = jobboard.Board(
            jobboard.backend(board_url, self.claim_expiry), 'fault-suite',
            self.claim_expiry)
        self.board.connect()
        self.stack.callback(self.board.close)
        self.victim_host = d.conductor_hosts[0]
        self.victim = d.conductors[0]
        self.standbys = d.conductors[1:]
        self.standby_hosts = d.conductor_hosts[1:]
        self.victim.stop()
        # Any conductor answers (a call the victim took as it died is
        # lost: asked again).
        self.poll = conductor_rpcapi.ConductorAPI(d.bus, timeout=5)

    def __exit__(self, *exc):
        self._resume_standbys()
        self.stack.close()

    def env(self, tmp_path, port_base):
        """A case's cluster on these hostagents."""
        return CaseEnv(tmp_path, port_base,
                       state_dirs=self.d.state_dirs.values())

    def _ask(self, method, *args):
        deadline = time.monotonic() + 60
        while True:
            try:
                return getattr(self.poll, method)(df.ADMIN, *args)
            except messaging.MessagingTimeout:
                assert time.monotonic() < deadline, (
                    'no conductor answers %s' % method)

    def _members(self):
        """{host: when it started} of the live conductors."""
        return {c['host']: datetime.datetime.fromisoformat(c['started_at'])
                for c in self._ask('list_conductors')}

    def arm(self, fault):
        """Start the victim with ``fault`` in its TENKS_FAULT; return
        once it is a live conductor."""
        deadline = time.monotonic() + 60
        # Its last process was killed: the group keeps it, and refuses
        # it again, until a listing finds its heartbeat expired (a bug:
        # test_conductors.test_a_killed_conductor_starts_again).
        while self.victim_host in self._members():
            assert time.monotonic() < deadline, (
                'the group of conductors keeps the dead %s'
                % self.victim_host)
            time.sleep(0.5)
        since = datetime.datetime.now(datetime.timezone.utc)
        self.victim.start(**{faults.ENV: fault})
        while self._members().get(self.victim_host, since) <= since:
            assert self.victim.process.poll() is None, (
                'conductor %s died as it started: see %s'
                % (self.victim_host, self.victim.log))
            assert time.monotonic() < deadline, (
                'conductor %s did not start' % self.victim_host)
            time.sleep(0.2)

    def submit(self, operation, env, api=None):
        """Start ``operation`` (an Operation) on ``env``'s cluster through
        ``api`` (default: any conductor's); its id."""
        api = api or self.d.api
        if operation.after is None:
            return api.teardown_cluster(df.ADMIN, env.cluster)
        return api.deploy_cluster(df.ADMIN,
                                  operation.spec(env, operation.after))

    def submit_to_victim(self, operation, env):
        """Start ``operation`` on the victim and let it claim the job,
        the standbys paused meanwhile; its id."""
        api = conductor_rpcapi.ConductorAPI(self.d.bus, timeout=60)
        api.client = api.client.prepare(server=self.victim_host)
        for service in self.standbys:
            service.process.send_signal(signal.SIGSTOP)
        try:
            operation_id = self.submit(operation, env, api)
            deadline = time.monotonic() + 30
            while self.victim.process.poll() is None and \
                    self._owner(operation_id) != self.victim_host:
                assert time.monotonic() < deadline, (
                    'conductor %s did not claim operation %s' % (
                        self.victim_host, operation_id))
                time.sleep(0.05)
        finally:
            self._resume_standbys()
        return operation_id

    def _owner(self, operation_id):
        """The conductor that has claimed the job of ``operation_id``."""
        job = self.board.find(operation_id)
        # (TaskFlow's Redis jobboard cannot name the owner of no claim.)
        if job is None or job.state != tf_states.CLAIMED:
            return None
        return self.board.owner(job)

    def _resume_standbys(self):
        for service in self.standbys:
            if service.process.poll() is None:
                service.process.send_signal(signal.SIGCONT)

    def run(self, operation, env):
        """Run ``operation`` and wait: it must succeed."""
        done = self.wait(self.submit(operation, env))
        assert done['state'] == 'succeeded', done['error']
        return done

    def wait(self, operation_id, timeout=300):
        """The record of an operation once it has ended."""
        deadline = time.monotonic() + timeout
        while True:
            operation = self._ask('get_operation', operation_id)
            if operation['state'] != 'running':
                return operation
            assert time.monotonic() < deadline, (
                'operation %s did not end' % operation_id)
            time.sleep(0.2)

    def prepare(self, operation, env):
        if operation.before is not None:
            self.run(Operation('prepare', None, operation.before), env)

    def teardown(self, env):
        self.run(Operation('teardown', None, None), env)

    def snapshot(self, env):
        return snapshot(env, url=self.url)

    def drift(self, env):
        return self._ask('audit', env.cluster)['drift']

    def recover(self, env):
        """After a takeover case or reference failed: no conductor
        paused or armed, the case's cluster torn down (its record would
        hold capacity that the next cases' scheduling counts)."""
        self._resume_standbys()
        self.victim.stop()
        with contextlib.suppress(Exception):
            self.teardown(env)


def _domains(env):
    """The names of the domains in libvirt named as ``env``'s nodes, but
    for its unmarked one."""
    conn = libvirt.open(cf.URI)
    try:
        names = [d.name() for d in conn.listAllDomains()]
    finally:
        conn.close()
    nodes = re.compile('%s\\d+$' % env.node_prefix)
    return sorted(name for name in names if nodes.search(name)
                  and not name.endswith(env.node_name(9)))


class TakeoverReference:
    """The reference run of an operation on several conductors: the
    tasks of its flow (as patterns), the new cluster and its domains."""

    def __init__(self, conductors, operation, tmp_path, port_base):
        env = conductors.env(tmp_path, port_base)
        try:
            with IPRoute() as ipr:
                ipr.link('add', ifname=env.uplink, kind='bridge')
            conductors.prepare(operation, env)
            operation_id = conductors.run(operation, env)['id']
            self.tasks = [pattern(task, env) for task in saved_tasks(
                conductors.url, operation_id)]
            self.new = conductors.snapshot(env)
            self.domains = len(_domains(env))
            if operation.after is not None:
                conductors.teardown(env)
        except BaseException:
            conductors.recover(env)
            raise
        finally:
            left = env.leftovers()
            env.force_clean()
            _remove_unmarked(env)
        assert left == [], 'the reference run left %s' % left


def run_takeover_case(conductors, operation, reference, boundary, tmp_path,
                      port_base, bystanders):
    """A takeover case (see run_case): the victim, started with
    ``kill:<boundary>``, claims the operation and dies once ``boundary``
    tasks have ended; a standby must take the job over and finish it:
    the new cluster, an audit without drift, nothing made twice."""
    env = conductors.env(tmp_path, port_base)
    try:
        unmarked = bystanders.unmarked(env)
        outcome = _takeover(conductors, env, unmarked, operation, reference,
                            boundary, bystanders)
    except BaseException:
        conductors.recover(env)
        env.force_clean()
        _remove_unmarked(env)
        raise
    left = env.leftovers()
    env.force_clean()
    _remove_unmarked(env)
    assert left == [], 'the case left %s' % left
    return outcome


def _takeover(conductors, env, unmarked, operation, reference, boundary,
              bystanders):
    conductors.prepare(operation, env)
    conductors.arm('kill:%d' % boundary)
    operation_id = conductors.submit_to_victim(operation, env)
    try:
        code = conductors.victim.process.wait(120)
    except subprocess.TimeoutExpired:
        code = None
    assert code == -9, 'not killed at boundary %d (exit %s)' % (boundary,
                                                                 code)
    killed = time.monotonic()
    done = conductors.wait(operation_id)
    seconds = time.monotonic() - killed
    assert done['state'] == 'succeeded', done['error']
    assert done['result']['resumed'] is True, done['result']
    assert done['conductor'] in conductors.standby_hosts, done['conductor']
    unmarked()
    bystanders.check()
    assert conductors.snapshot(env) == reference.new, (
        'taken over: %s, not the new cluster %s' % (
            conductors.snapshot(env), reference.new))
    found = conductors.drift(env)
    assert found == [], 'drift after the takeover: %s' % found
    assert len(_domains(env)) == reference.domains, _domains(env)
    if reference.new is not None:
        conductors.teardown(env)
    assert conductors.snapshot(env) is None
    unmarked(final=True)
    return 'taken over by %s in %.1f s' % (
        done['conductor'].split('-')[0], seconds)
