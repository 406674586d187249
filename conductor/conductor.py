"""The conductor: what it is made of, started and stopped.

It reaches hypervisors only through their hostagents, over the bus, and
records everything it creates in the state database as it goes. This
module wires its parts (the bus, the state database and its migration,
the flow runner, the cloud) and the rooms that do its work: deploys and
plans (conductor.deployments), teardowns (conductor.teardowns), host
maintenance (conductor.maintenance), hypervisors (conductor.hypervisors),
aggregates (conductor.aggregates), the audit (conductor.audit) and the
records (tenks.db.views). Its RPC API (conductor.manager) calls them.
"""

import contextlib
import datetime
import os
import threading

import fasteners
from oslo_log import log as logging

from conductor import agents
from conductor import aggregates
from conductor import bmc_faults
from conductor import deployments
from conductor import hypervisors
from conductor import late
from conductor import locks
from conductor import maintenance
from conductor import manager
from conductor import moves
from conductor import operations
from conductor import teardowns
from conductor import waiters
from flows import context
from hostagent import rpcapi as hostagent_rpcapi
from tenks import exceptions
from tenks import fileutils
from tenks import notifier
from tenks import rpc
from tenks import scheduler
from tenks import states
from tenks.cloud import connection as cloud_connection
from tenks.db import api as db_api
from tenks.db import migrations
from tenks.db import views

LOG = logging.getLogger(__name__)

# Seconds between two prunes of the state database by a running
# conductor (it prunes as it starts too).
PRUNE_INTERVAL = 3600


class Conductor:

    def __init__(self, conf, bus, check_policy=True):
        """``check_policy``: check each RPC call against the policy
        rules (tenks.policy)."""
        self.conf = conf
        self.bus = bus
        self.host = conf.conductor.host
        self.state_dir = fileutils.private_dir(conf.state_dir)
        self.lock_dir = fileutils.private_dir(
            os.path.join(self.state_dir, 'locks'))
        engine = db_api.create_engine(db_api.url(conf, self.state_dir))
        version = db_api.schema_version(engine)
        if version != migrations.HEAD:
            from tenks.db import migration
            if conf.database.connection:
                # The operator's database: tenks-manage changes its
                # schema (see tenks.db.migration).
                from tenks import manage
                engine.dispose()
                raise migration.schema_error(
                    engine, version,
                    'run "%s"' % manage.sync_command(conf))
            # Once, even when several processes start on a fresh database.
            with migration.schema_lock(self.lock_dir):
                migration.upgrade(engine)
        self._runner = None
        self._runner_lock = threading.Lock()
        self._stopping = threading.Event()
        self.db = db_api.StateDB(engine)
        self.notifier = notifier.Notifier(bus, self.db,
                                          'tenks.conductor.%s' % self.host)
        self.waiters = waiters.Waiters()
        self.late_results = late.LateResults(self.db, self.notifier)
        self.agents = agents.AgentClient(
            bus, self.waiters, self.host, conf.conductor.agent_timeout,
            conf.conductor.agent_retries, self.late_results)
        self.cloud = cloud_connection.Cloud(conf)
        context.install(context.Clients(
            db=self.db, agents=self.agents, notifier=self.notifier,
            cloud=self.cloud))
        self.jobs = None
        board = coordination = None
        if conf.conductor.jobboard_url:
            board, coordination = self._jobboard(conf)
            self.locks = locks.ClusterLocks(locks.shared(coordination))
        else:
            self.locks = locks.ClusterLocks(locks.lock_files(self.lock_dir))
        self.coordination = coordination
        self._allocation_mutex = threading.Lock()
        self.aggregates = aggregates.Aggregates(
            self.db, self.allocating,
            conf.scheduler.default_availability_zone, self.cloud)
        self.registry = hypervisors.HypervisorRegistry(
            conf, bus, self.db, self.agents, self.aggregates)
        self.scheduler_options = scheduler.options_from_conf(conf)
        self.operations = operations.Operations(
            conf, self.db, self.notifier, self.locks, board)
        # What it does, one room per concern; ``api`` is what callers
        # reach: the RPC API, which the embedded CLI calls too.
        self.records = views.Records(self.db)
        self.deployments = deployments.Deployments(self)
        self.teardowns = teardowns.Teardowns(self)
        self.maintenance = maintenance.Maintenance(self)
        self.bmc_faults = bmc_faults.BmcFaults(self)
        if board is not None:
            from conductor import jobs
            self.jobs = jobs.JobRunner(self, board, coordination)
        self.api = manager.ConductorManager(self, check_policy)
        self.server = bus.get_server(rpc.CONDUCTOR_TOPIC, self.host,
                                     [self.api])

    def _jobboard(self, conf):
        """The jobboard and the tooz coordination of conductors that
        share their work (conductor.jobboard)."""
        if not conf.database.connection:
            raise exceptions.ConfigError(
                reason='[conductor] jobboard_url needs [database] '
                       'connection: conductors that share their operations '
                       'share their state database')
        from conductor import jobboard
        backend = jobboard.backend(conf.conductor.jobboard_url,
                                   conf.conductor.jobboard_claim_expiry)
        return (jobboard.Board(backend, self.host,
                               conf.conductor.jobboard_claim_expiry),
                jobboard.Coordination(backend, self.host))

    @property
    def runner(self):
        """The flow runner, made when a first flow runs: a re-run that
        changes nothing needs neither TaskFlow nor its tables."""
        with self._runner_lock:
            if self._runner is None:
                from conductor import runner
                self._runner = runner.FlowRunner(
                    self.db.engine, self.conf.conductor.workers)
            return self._runner

    def start(self):
        self.started_at = datetime.datetime.now(datetime.timezone.utc)
        if self.jobs is not None:
            # Before any call comes: a submit posts its job.
            self.jobs.start()
        self.server.start()
        self.prune()
        if self.bus.embedded:
            # Its one hostagent runs in this process and is not waited on.
            return
        self._pruner = threading.Thread(target=self._prune_hourly,
                                        name='prune', daemon=True)
        self._pruner.start()
        self.aggregates.start_mirror(
            self.conf.openstack.placement_aggregates_interval)
        # Hostagents that started first registered with nobody: their
        # casts found no queue. Ask them to register now.
        try:
            hostagent_rpcapi.HostAgentAPI(self.bus).ask_to_register()
        except Exception as e:
            LOG.warning('Could not ask the hostagents to register: %s', e)

    def prune(self):
        """Forget the flows of the operations that have ended, and what
        is older than [conductor] operation_retention_days (see
        StateDB.prune). Returns how many of each went."""
        days = self.conf.conductor.operation_retention_days
        pruned = self.db.prune(
            datetime.datetime.now(datetime.timezone.utc)
            - datetime.timedelta(days=days) if days else None)
        if any(pruned.values()):
            LOG.info('Pruned the state database: %s', ', '.join(
                '%d %s' % (count, what) for what, count in
                sorted(pruned.items()) if count))
        return pruned

    def _prune_hourly(self):
        while not self._stopping.wait(PRUNE_INTERVAL):
            try:
                self.prune()
            except Exception:
                LOG.exception('Could not prune the state database')

    def stop(self, grace=None):
        """Take no more work, let running operations finish, then stop.

        Operations still running after ``grace`` seconds (default:
        graceful_shutdown_timeout) are handed back: their flows are
        persisted, and the next start of this conductor resumes them
        (with a jobboard, another conductor once their claims expire).
        Returns how many were handed back.
        """
        if self.jobs is not None:
            self.jobs.stop()
        left = self.drain(grace)
        self._stopping.set()
        self.aggregates.stop_mirror()
        self.server.stop()
        self.server.wait()
        self.operations.shutdown(wait=not left)
        if self.jobs is not None and not left:
            self.jobs.close()
        return left

    def drain(self, grace=None):
        """Take no more work and let running operations finish; return
        how many still run after ``grace`` seconds (default:
        graceful_shutdown_timeout), their flows persisted for a resume."""
        if grace is None:
            grace = self.conf.conductor.graceful_shutdown_timeout
        return self.operations.drain(grace)

    def resume_interrupted(self):
        """Resume what this conductor was running when it last stopped,
        once the hostagents it knew have registered again (start asked
        them to) and answered its check, for at most agent_down_time:
        until then a host it has not heard from yet looks down (or
        unverified), and a resumed deploy would find no hypervisor to
        inspect."""
        if not self.db.list_operations(state=states.OPERATION_RUNNING,
                                       conductor=self.host):
            return
        if not self.bus.embedded:
            self.registry.wait_for_registrations(
                self.started_at, self.conf.conductor.agent_down_time)
        self.operations.resume_interrupted(self.resume)

    def end_orphans(self):
        """End the operations of this host that no process runs and whose
        cluster's record is gone: a teardown killed after its last
        removal, a deploy killed once rolled back. No later operation of
        their cluster would end them; resumed, they end as they ended.
        Returns once they have, their clusters' locks free again."""
        for operation_id in self.operations.resume_interrupted(
                self.resume, lambda operation: self.db.get_cluster(
                    operation.cluster) is None):
            try:
                self.operations.wait(operation_id)
            except exceptions.TenksError:
                pass  # recorded in the operation

    # What the rooms share

    @contextlib.contextmanager
    def allocating(self):
        """Scheduling, one at a time across threads and processes, and
        across conductors that share a jobboard."""
        if self.coordination is not None:
            lock = self.coordination.lock('allocation')
        else:
            lock = fasteners.InterProcessLock(
                os.path.join(self.lock_dir, 'allocation.lock'))
        with self._allocation_mutex, lock:
            yield

    def conductors(self):
        """The live conductors: {'host', 'started_at', 'heartbeat_at',
        'jobs'} each; without a jobboard, this one alone."""
        if self.jobs is not None:
            return sorted(self.jobs.members(), key=lambda c: c['host'])
        now = datetime.datetime.now(datetime.timezone.utc)
        return [{'host': self.host,
                 'started_at': self.started_at.isoformat(),
                 'heartbeat_at': now.isoformat(),
                 'jobs': self.operations.running()}]

    def moving(self):
        """Records of the nodes running moves take to their new hosts."""
        return moves.in_flight(self.db.list_operations(
            state=states.OPERATION_RUNNING))

    @staticmethod
    def store(operation_id, name):
        """What an operation's flow is given to start with."""
        return {'operation_id': operation_id, 'cluster': name}

    def resume(self, operation_id, on_progress, start=None):
        """Resume the flow of an interrupted operation; one interrupted
        before its flow was saved starts again from its checks, with
        ``start()`` when given (a job's, with its submit's arguments)."""
        try:
            outcome = self.runner.resume(operation_id,
                                         on_progress=on_progress)
        except exceptions.NothingToResume:
            if start is not None:
                return start()
            operation = self.db.get_operation(operation_id)
            if self.db.get_cluster(operation.cluster) is None:
                raise
        else:
            operation = self.db.get_operation(operation_id)
            if operation.kind == 'deploy':
                # The changes the whole deploy applies, as a run gives.
                outcome.plan = operation.plan['changes']
            elif operation.kind == 'move':
                outcome.moved = moves.moved(operation.plan)
            return outcome
        if operation.kind == 'move':
            # Planned again by a new "maintenance start".
            raise exceptions.NothingToResume(id=operation_id)
        LOG.info('Operation %s had not begun its flow: starting it',
                 operation_id)
        run = (self.deployments.run if operation.kind == 'deploy'
               else self.teardowns.run)
        return run(operation_id, on_progress=on_progress)

