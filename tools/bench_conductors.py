"""Time several conductors on a jobboard: takeover, resumed cost and
throughput (issue 22).

Starts three tenks-conductor processes on RabbitMQ (a private vhost), one
PostgreSQL state database and a Redis (or ZooKeeper) jobboard namespace of
their own, with two tenks-hostagent processes on real libvirt, IPMI BMCs
and Linux bridges (the functional tests' fixtures, as
tests/functional/test_conductors.py does), and prints three tables:

takeover    a deploy of 2 nodes whose conductor dies (SIGKILL, TENKS_FAULT
            kill:node:* on every conductor: the first to claim the deploy
            dies once its first node task has succeeded; the one that
            resumes it does not): the time from the death to another
            conductor's claim (the operation's conductor changes) and to
            the first task the new owner finishes; goal: the claim expiry
            plus at most 5 s.
resumed     a deploy of --nodes nodes killed at about half way (TENKS_FAULT
            kill:<k>, k the task ends until half the node tasks have
            ended in a full deploy, see below): the resumed run's time, from
            the takeover to the end, against a full deploy's (the median of
            --runs, submit to end); goal: at most 60 %.
throughput  --deploys deploys of one node each (distinct clusters) submitted
            at once (a thread each), on one, two and three conductors (the
            same hostagents): the time until the last was accepted and
            until all have ended, deploys per minute, how many each
            conductor ran, the machine's CPUs' busy share and the CPU time
            of the conductors and of the hostagents meanwhile, and the
            teardown of them all.

kill:<k> also fires in a resumed flow (kill:<pattern> does not, but no
pattern names the half of the nodes): k is chosen so that what is left to
resume has fewer than k tasks. The moments come from polling the state
database every 50 ms. Needs root, tools/setup.sh done (RabbitMQ,
PostgreSQL, Redis, ZooKeeper); uses IPMI ports from --port-base (as many as
the larger of --runs times --nodes and --deploys) and removes every VM,
BMC, bridge, vhost, namespace and database it made, also on Ctrl-C or
SIGTERM; when it fails, it keeps the services' logs and says where.

    .venv/bin/python tools/bench_conductors.py [--runs 3] [--nodes 8]
        [--expiry 5] [--deploys 30] [--jobboard redis|zookeeper]
        [--port-base 10500]
"""
# ruff: noqa: E402

import argparse
import collections
import contextlib
import logging
import math
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from concurrent import futures

# futurist and oslo.service import eventlet, which warns that it is
# deprecated although Tenks never uses it (as in tenks/cli/main.py).
warnings.filterwarnings('ignore', message='(?s).*Eventlet is deprecated')

# The fixtures of the functional tests start the services.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

import sqlalchemy as sa

from conductor import rpcapi
from tenks.db import flow_tables
from tenks.db import models
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df
from tests.functional import jobboard_fixtures as jf
from tests.functional import shared_db_fixtures as sdb

ADMIN = df.ADMIN
# Seconds between two looks at the state database.
POLL = 0.05
# Nodes of a takeover run's deploy.
TAKEOVER_NODES = 2
# Seconds a deploy or teardown may take before the benchmark gives up.
TIMEOUT = 600
# What the issue asks: takeover within the expiry plus this many seconds;
# a resumed run at most this share of a full one.
TAKEOVER_GOAL = 5
RESUMED_GOAL = 0.6

OPERATIONS = models.Operation.table
ATOMS = flow_tables.ATOMS
FLOWS = flow_tables.FLOWS


class Watch:
    """What the conductors record in their shared state database."""

    def __init__(self, url):
        # A connection that PostgreSQL closed is opened again.
        self.engine = sa.create_engine(url, pool_size=1, pool_pre_ping=True)

    def close(self):
        self.engine.dispose()

    def operations(self, ids):
        """{id: (state, conductor)} of the operations ``ids``."""
        with self.engine.connect() as conn:
            return {row.id: (row.state, row.conductor) for row in
                    conn.execute(sa.select(OPERATIONS.c.id,
                                           OPERATIONS.c.state,
                                           OPERATIONS.c.conductor)
                                 .where(OPERATIONS.c.id.in_(ids)))}

    def tasks(self, operation_id):
        """The names of the tasks of the operation's flow, those that
        have succeeded first, in the order they did; and how many
        have."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(ATOMS.c.name, ATOMS.c.state)
                .join(FLOWS, ATOMS.c.parent_uuid == FLOWS.c.uuid)
                .where(FLOWS.c.parent_uuid == operation_id,
                       ATOMS.c.atom_type == 'TASK_DETAIL')
                .order_by(ATOMS.c.state != 'SUCCESS', sa.func.coalesce(
                    ATOMS.c.updated_at, ATOMS.c.created_at))).all()
        return ([row.name for row in rows],
                sum(row.state == 'SUCCESS' for row in rows))


class Bench:

    def __init__(self, deployment, watch, tmp, port_base, envs):
        """``envs``: where the clusters it makes are listed."""
        self.d = deployment
        self.watch = watch
        self.tmp = tmp
        self.port_base = port_base
        self.envs = envs
        # Calls sent before a conductor listens are lost: a short timeout.
        self.poll = rpcapi.ConductorAPI(deployment.bus, timeout=2)

    def env(self):
        """A new cluster with names of its own (ClusterEnv draws them at
        random: a name this benchmark has used is drawn again)."""
        while True:
            env = cf.ClusterEnv(self.tmp / ('c%d' % len(self.envs)),
                                self.port_base,
                                state_dirs=self.d.state_dirs.values())
            if env.cluster not in {e.cluster for e in self.envs}:
                self.envs.append(env)
                return env

    def spec(self, env, count, port):
        return env.spec(count=count, ipmi_port_range_start=port,
                        ipmi_port_range_end=port + count - 1)

    def dead(self):
        return [host for host, service in zip(self.d.conductor_hosts,
                                              self.d.conductors, strict=True)
                if service.process.poll() is not None]

    def listed(self):
        """The hosts of the live conductors; None while none answers."""
        try:
            return {c['host'] for c in self.poll.list_conductors(ADMIN)}
        except Exception:
            return None

    def until(self, what, condition, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise SystemExit('%s took over %d s' % (what, timeout))
            time.sleep(POLL)

    def restart(self, hosts, **environ):
        """Start the conductors of ``hosts`` again (stopped first if they
        run), with ``environ`` in their environment; once they are in
        the group of conductors."""
        hosts = set(hosts)
        services = [service for host, service in zip(
            self.d.conductor_hosts, self.d.conductors, strict=True)
            if host in hosts]
        killed = hosts & set(self.dead())
        if killed:
            # A killed conductor stays a member until its heartbeat
            # expires and a listing (by another conductor) forgets it;
            # until then, the same host cannot join again (tooz:
            # MemberAlreadyExist).
            def forgotten():
                listed = self.listed()
                return listed is not None and not listed & killed

            self.until('forgetting conductors %s' % sorted(killed),
                       forgotten)
        for service in services:
            service.stop()
        for service in services:
            service.start(**environ)

        def started():
            for service in services:
                if service.process.poll() is not None:
                    raise SystemExit('%s exited (status %d) as it started'
                                     % (service.name,
                                        service.process.returncode))
            return hosts <= (self.listed() or set())

        self.until('starting conductors %s' % sorted(hosts), started)

    def runs(self, runs, count, fault=None):
        """``runs`` deploys of ``count`` nodes, one after another; their
        moments (see deploy). With ``fault`` (TENKS_FAULT), every
        conductor dies at it in a flow it starts, and the one killed
        starts again after each run. The clusters are torn down at once
        at the end, by conductors with no fault (kill:<k> would kill
        the conductor of a teardown too)."""
        hosts = self.d.conductor_hosts
        if fault:
            self.restart(hosts, TENKS_FAULT=fault)
        results = []
        envs = [self.env() for _ in range(runs)]
        for i, env in enumerate(envs):
            results.append(self.deploy(env, count, self.port_base + i * count,
                                       killed=bool(fault)))
            if fault and i < runs - 1:
                self.restart([results[-1]['victim']], TENKS_FAULT=fault)
        if fault:
            self.restart(hosts)
        self.teardown(envs)
        return results

    def deploy(self, env, count, port, killed):
        """Deploy ``count`` nodes of ``env``'s cluster, their BMCs on
        ports from ``port``. Returns the moments (monotonic s) of the
        deploy: submitted, ended and, when
        ``killed`` (a conductor must die), died, taken (another claims
        it), first (the new owner finished a task), with what had been
        done when it died: done, total (tasks), nodes (node tasks), and
        the dead conductor: victim; and order: its tasks in the order
        they succeeded."""
        spec = self.spec(env, count, port)
        moments = {'submitted': time.monotonic()}
        operation_id = self.d.api.deploy_cluster(ADMIN, spec)
        self._follow(operation_id, moments, killed)
        operation = self.d.api.get_operation(ADMIN, operation_id)
        if operation['state'] != 'succeeded':
            raise SystemExit('deploy %s: %s' % (operation_id,
                                                operation['error']))
        if operation['result']['resumed'] is not killed:
            raise SystemExit('deploy %s: resumed is %s' % (
                operation_id, operation['result']['resumed']))
        nodes = self.d.api.list_nodes(ADMIN, env.cluster)
        if [n['state'] for n in nodes] != ['deployed'] * count:
            raise SystemExit('deploy %s left nodes %s' % (
                operation_id, [(n['name'], n['state']) for n in nodes]))
        moments['order'], _ = self.watch.tasks(operation_id)
        return moments

    def _follow(self, operation_id, moments, killed):
        deadline = time.monotonic() + TIMEOUT
        while True:
            now = time.monotonic()
            dead = self.dead()
            if len(dead) > 1 or (dead and not killed):
                raise SystemExit('conductors %s died (a resumed flow killed '
                                 'too?)' % dead)
            if dead and 'died' not in moments:
                moments.update(died=now, victim=dead[0])
                names, moments['done'] = self.watch.tasks(operation_id)
                moments['total'] = len(names)
                # Node tasks: each makes a batch of a hypervisor's nodes.
                moments['nodes'] = sum(name.startswith('node:') for name in
                                       names[:moments['done']])
                moments['node_tasks'] = sum(name.startswith('node:')
                                            for name in names)
            [(state, conductor)] = self.watch.operations(
                [operation_id]).values()
            if 'died' in moments and 'taken' not in moments and \
                    conductor != moments['victim']:
                moments['taken'] = now
                _, moments['done_taken'] = self.watch.tasks(operation_id)
            elif 'taken' in moments and 'first' not in moments and \
                    self.watch.tasks(operation_id)[1] > moments['done_taken']:
                moments['first'] = now
            if state != 'running':
                moments['ended'] = now
                if killed and 'taken' not in moments:
                    raise SystemExit('deploy %s ended %s with no conductor '
                                     'killed' % (operation_id, state))
                return
            if now > deadline:
                raise SystemExit('deploy %s took over %d s'
                                 % (operation_id, TIMEOUT))
            time.sleep(POLL)

    def teardown(self, envs):
        """Tear the clusters of ``envs`` down at once; the seconds until
        all ended. SystemExit if one fails or leaves anything behind."""
        started = time.monotonic()
        operations = [self.d.api.teardown_cluster(ADMIN, env.cluster)
                      for env in envs]
        self.until('tearing %d clusters down' % len(envs),
                   lambda: all(state != 'running' for state, _ in
                               self.watch.operations(operations).values()))
        elapsed = time.monotonic() - started
        failed = [self.d.api.get_operation(ADMIN, o)['error']
                  for o in operations if self.watch.operations([o])[o][0]
                  != 'succeeded']
        if failed:
            raise SystemExit('teardowns failed: %s' % failed)
        left = [thing for env in envs for thing in env.leftovers()]
        if left:
            raise SystemExit('the teardowns left %s behind' % left)
        return elapsed

    def throughput(self, deploys, conductors):
        """``deploys`` one-node deploys submitted at once (a thread
        each), on the first ``conductors`` conductors. Returns a row of
        figures: submit (s until the last was accepted), total (s until
        all ended), owners ({conductor: how many it ran}), busy (the
        machine's CPUs' busy share meanwhile), cpu ({'conductors',
        'hostagents': CPU s they used}), teardown (s)."""
        envs = [self.env() for _ in range(deploys)]
        specs = [self.spec(env, 1, self.port_base + i)
                 for i, env in enumerate(envs)]
        services = {'conductors': self.d.conductors[:conductors],
                    'hostagents': [self.d.agent(h) for h in self.d.hosts]}
        used = {kind: cpu_seconds(group) for kind, group in services.items()}
        busy = machine_cpu()
        started = time.monotonic()
        with futures.ThreadPoolExecutor(deploys) as callers:
            operations = list(callers.map(
                lambda spec: self.d.api.deploy_cluster(ADMIN, spec), specs))
        row = {'submit': time.monotonic() - started}
        self.until('%d deploys' % deploys, lambda: all(
            state != 'running' for state, _ in
            self.watch.operations(operations).values()))
        row['total'] = time.monotonic() - started
        busy = [after - before for before, after in zip(
            busy, machine_cpu(), strict=True)]
        row['busy'] = busy[0] / busy[1]
        row['cpu'] = {kind: cpu_seconds(group) - used[kind]
                      for kind, group in services.items()}
        ended = self.watch.operations(operations)
        failed = [self.d.api.get_operation(ADMIN, o)['error']
                  for o, (state, _) in ended.items() if state != 'succeeded']
        if failed:
            raise SystemExit('%d of %d deploys on %d conductor(s) failed: '
                             '%s' % (len(failed), deploys, conductors,
                                     failed[0]))
        row['owners'] = collections.Counter(c for _, c in ended.values())
        row['teardown'] = self.teardown(envs)
        return row


def cpu_seconds(services):
    """CPU seconds (user and system) the processes of ``services`` have
    used."""
    ticks = 0
    for service in services:
        with open('/proc/%d/stat' % service.process.pid) as f:
            fields = f.read().rpartition(')')[2].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf('SC_CLK_TCK')


def machine_cpu():
    """(busy, all) time of this machine's CPUs so far, in ticks."""
    with open('/proc/stat') as f:
        user, nice, system, idle, iowait, irq, softirq, steal = map(
            int, f.readline().split()[1:9])
    busy = user + nice + system + irq + softirq
    return busy, busy + idle + iowait + steal


def force_clean(envs):
    """Remove whatever of the clusters of ``envs`` is left (after a
    failure or an interruption), saying what."""
    for env in envs:
        left = env.leftovers()
        if left:
            env.force_clean()
            print('Removed what cluster %s left: %s' % (env.cluster, left),
                  file=sys.stderr)


def verdict(met):
    return 'goal met' if met else 'over the goal'


def spread(values):
    return '%.2f (%.2f-%.2f)' % (statistics.median(values), min(values),
                                 max(values))


def half_way(order):
    """k of TENKS_FAULT kill:<k>: the task ends (``order``, a full
    deploy's tasks in the order they succeeded) until half its node
    tasks (each a batch of a hypervisor's nodes) have ended."""
    half = math.ceil(sum(name.startswith('node:') for name in order) / 2)
    nodes = 0
    for k, name in enumerate(order, 1):
        nodes += name.startswith('node:')
        if nodes == half:
            return k
    raise SystemExit('a full deploy succeeded no node task: %s' % order)


def takeover_table(expiry, rows):
    print('\nTakeover: a deploy of %d nodes, its conductor killed '
          '(SIGKILL) after its first node task; claim expiry %d s, goal '
          '%d s' % (TAKEOVER_NODES, expiry, expiry + TAKEOVER_GOAL))
    print('%-4s %-22s %12s %14s' % ('run', 'killed', 'takeover s',
                                    'first task s'))
    for i, m in enumerate(rows, 1):
        print('%-4d %-22s %12.2f %14.2f' % (
            i, m['victim'], m['taken'] - m['died'],
            m['first'] - m['died'] if 'first' in m else math.nan))
    takeover = [m['taken'] - m['died'] for m in rows]
    print('takeover %s s (median, min-max): %s' % (spread(takeover), verdict(
        max(takeover) <= expiry + TAKEOVER_GOAL)), flush=True)


def resumed_table(count, full, k, rows):
    reference = statistics.median(full)
    print('\nResumed cost: a deploy of %d nodes; full deploy %s s (median, '
          'min-max of %d); killed at kill:%d (half the node tasks ended); '
          'goal %d %%'
          % (count, spread(full), len(full), k, RESUMED_GOAL * 100))
    print('%-4s %-18s %-12s %10s %10s %9s %10s' % (
        'run', 'tasks done at kill', 'node tasks', 'takeover s',
        'resumed s', 'of full', 'killed run'))
    for i, m in enumerate(rows, 1):
        resumed = m['ended'] - m['taken']
        print('%-4d %-18s %-12s %10.2f %10.2f %8.0f%% %10.2f' % (
            i, '%d/%d' % (m['done'], m['total']),
            '%d/%d' % (m['nodes'], m['node_tasks']), m['taken'] - m['died'],
            resumed,
            100 * resumed / reference, m['ended'] - m['submitted']))
    share = statistics.median(m['ended'] - m['taken'] for m in rows) \
        / reference
    print('resumed run %.0f %% of a full deploy (median): %s' % (
        100 * share, verdict(share <= RESUMED_GOAL)), flush=True)


def measure(bench, args):
    """Run the three parts and print their tables."""
    started = time.monotonic()

    full = bench.runs(args.runs, args.nodes)
    k = half_way(full[0]['order'])
    if len(full[0]['order']) - k >= k:
        raise SystemExit('kill:%d would kill the resumed flow too: %d '
                         'tasks in all' % (k, len(full[0]['order'])))
    takeover_table(args.expiry, bench.runs(args.runs, TAKEOVER_NODES,
                                           'kill:node:*'))
    resumed_table(args.nodes, [m['ended'] - m['submitted']
                               for m in full], k,
                  bench.runs(args.runs, args.nodes, 'kill:%d' % k))

    print('\nThroughput: %d one-node deploys (distinct clusters) '
          'submitted at once' % args.deploys)
    print('%-10s %8s %7s %11s %-13s %8s %-17s %10s' % (
        'conductors', 'submit s', 'total s', 'deploys/min', 'per conductor',
        'CPU busy', 'CPU s cond/agents', 'teardown s'))
    for n in (1, 2, 3):
        if n == 1:
            for service in bench.d.conductors[1:]:
                service.stop()
        else:
            bench.restart([bench.d.conductor_hosts[n - 1]])
        row = bench.throughput(args.deploys, n)
        print('%-10d %8.1f %7.1f %11.1f %-13s %7.0f%% %-17s %10.1f' % (
            n, row['submit'], row['total'], 60 * args.deploys / row['total'],
            ' '.join(str(row['owners'][host])
                     for host in bench.d.conductor_hosts[:n]),
            100 * row['busy'], '%.1f / %.1f' % (row['cpu']['conductors'],
                                                row['cpu']['hostagents']),
            row['teardown']), flush=True)
    print('\n%.0f s in all; load average %.2f %.2f %.2f' % (
        time.monotonic() - started, *os.getloadavg()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=3,
                        help='takeover runs, full and killed deploys each')
    parser.add_argument('--nodes', type=int, default=8,
                        help='nodes of the resumed-cost deploys (2 or more)')
    parser.add_argument('--expiry', type=int, default=5,
                        help='[conductor] jobboard_claim_expiry, s (3 or '
                             'more)')
    parser.add_argument('--deploys', type=int, default=30,
                        help='one-node deploys of the throughput part')
    parser.add_argument('--jobboard', choices=('redis', 'zookeeper'),
                        default='redis')
    parser.add_argument('--port-base', type=int, default=10500)
    args = parser.parse_args()
    if args.nodes < 2 or args.expiry < 3 or args.runs < 1 or \
            args.deploys < 1:
        parser.error('--nodes 2, --expiry 3, --runs and --deploys 1 at '
                     'least')

    cf.interrupt_on_sigterm()
    # Thirty calls at once wait on as many reply queues, which
    # oslo.messaging takes for a leak and says so among the figures.
    logging.getLogger('oslo_messaging._drivers.amqpdriver').setLevel(
        logging.ERROR)
    namespace = {'redis': jf.redis_namespace,
                 'zookeeper': jf.zookeeper_namespace}[args.jobboard]
    load = os.getloadavg()
    print('3 conductors on a %s jobboard, PostgreSQL, RabbitMQ, 2 '
          'hostagents; claim expiry %d s; load average %.2f %.2f %.2f'
          % (args.jobboard, args.expiry, *load), flush=True)
    with contextlib.ExitStack() as stack:
        tmp = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix='tenks-bench-conductors-')))
        board = stack.enter_context(namespace())
        url = stack.enter_context(sdb.database('postgresql'))
        deployment = df.Deployment(tmp / 'services', conductors=3,
                                   jobboard=board, database=url,
                                   claim_expiry=args.expiry)
        synced = sdb.manage(deployment.conductor.config, 'db', 'sync')
        if synced.returncode:
            raise SystemExit('tenks-manage db sync: %s' % synced.stderr)
        watch = Watch(url)
        stack.callback(watch.close)
        envs = []
        # After the services have stopped: nothing makes more then.
        stack.callback(force_clean, envs)
        d = stack.enter_context(deployment)
        bench = Bench(d, watch, tmp, args.port_base, envs)
        try:
            measure(bench, args)
        except (Exception, SystemExit):
            kept = tempfile.mkdtemp(prefix='tenks-bench-conductors-logs-')
            for log in (tmp / 'services').glob('*.log'):
                shutil.copy(log, kept)
            print("The services' logs are in %s" % kept, file=sys.stderr)
            raise


if __name__ == '__main__':
    main()
