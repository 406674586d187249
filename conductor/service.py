"""The conductor: runs deploy and teardown flows for clusters.

It reaches hypervisors only through their hostagents, over the bus, and
records everything it creates in the state database as it goes. A
request is checked against the record and its cluster locked at once;
then the operation (cloud check, inspection, scheduling, its flow) runs
in a bounded pool of threads, and every way it can end is recorded as
its final state with a reason.
"""

import contextlib
import datetime
import os
import threading
import time
import uuid
from concurrent import futures

import fasteners
from oslo_log import log as logging

from conductor import agents
from conductor import locks
from conductor import manager
from conductor import plans
from conductor import preflight
from conductor import runner
from conductor import waiters
from flows import context
from flows import deploy
from flows import records
from flows import teardown
from hostagent import rpcapi as hostagent_rpcapi
from tenks import cloud
from tenks import exceptions
from tenks import fileutils
from tenks import notifier
from tenks import rpc
from tenks import scheduler
from tenks.db import api as db_api
from tenks.db import migration

LOG = logging.getLogger(__name__)

SUCCEEDED = 'succeeded'
FAILED = 'failed'
INTERRUPTED = 'interrupted'


class Conductor:

    def __init__(self, conf, bus):
        self.conf = conf
        self.bus = bus
        self.host = conf.conductor.host
        self.state_dir = fileutils.private_dir(conf.state_dir)
        self.lock_dir = fileutils.private_dir(
            os.path.join(self.state_dir, 'locks'))
        engine = db_api.create_engine(
            conf.conductor.database_connection
            or db_api.default_url(self.state_dir))
        # Once, even when several processes start on a fresh database.
        with migration.schema_lock(self.lock_dir):
            migration.upgrade(engine)
            self.runner = runner.FlowRunner(engine, conf.conductor.workers)
        self.db = db_api.StateDB(engine)
        self.waiters = waiters.Waiters()
        self.agents = agents.AgentClient(
            bus, self.waiters, self.host, conf.conductor.agent_timeout,
            conf.conductor.agent_retries)
        self.notifier = notifier.Notifier(bus, self.db,
                                          'tenks.conductor.%s' % self.host)
        self.cloud = cloud.Cloud(conf)
        context.install(context.Clients(
            db=self.db, agents=self.agents, notifier=self.notifier,
            cloud=self.cloud))
        self.locks = locks.ClusterLocks(self.lock_dir)
        self._allocation_mutex = threading.Lock()
        self._pool = futures.ThreadPoolExecutor(
            max_workers=conf.conductor.max_operations,
            thread_name_prefix='operation')
        self._running = {}
        # Operations waiting for a worker:
        # {id: (kind, cluster, its state before, resumed)}.
        self._queued = {}
        self._running_mutex = threading.Lock()
        self._accepting = True
        self.server = bus.get_server(
            rpc.CONDUCTOR_TOPIC, self.host,
            [manager.ConductorManager(self)])

    def start(self):
        self.server.start()
        # Hostagents that started first registered with nobody: their
        # casts found no queue. Ask them to register now.
        try:
            hostagent_rpcapi.HostAgentAPI(self.bus).ask_to_register()
        except Exception as e:
            LOG.warning('Could not ask the hostagents to register: %s', e)

    def stop(self, grace=None):
        """Take no more work, let running operations finish, then stop.

        Operations still running after ``grace`` seconds (default:
        graceful_shutdown_timeout) are handed back: their flows are
        persisted, and the next start of this conductor resumes them.
        Returns how many were handed back.
        """
        if grace is None:
            grace = self.conf.conductor.graceful_shutdown_timeout
        # Under the mutex: a submit either made it to the pool before
        # this, and is cancelled or awaited below, or sees it and refuses.
        with self._running_mutex:
            self._accepting = False
        self._cancel_queued()
        with self._running_mutex:
            running = list(self._running.values())
        left = futures.wait(running, timeout=grace).not_done
        if left:
            LOG.warning('Stopping with %d operation(s) still running; they '
                        'resume when this conductor starts again', len(left))
        self.server.stop()
        self.server.wait()
        self._pool.shutdown(wait=not left, cancel_futures=True)
        return len(left)

    def _cancel_queued(self):
        """End the operations still waiting for a worker: a stopping
        conductor starts no new work. A resumed one is handed back as
        it was; a new one has done nothing and fails saying so."""
        with self._running_mutex:
            queued = [(operation_id, info) for operation_id, info
                      in self._queued.items()
                      if self._running[operation_id].cancel()]
            for operation_id, _ in queued:
                del self._queued[operation_id]
                del self._running[operation_id]
        for operation_id, (kind, name, before, resumed) in queued:
            if not resumed:
                self._fail_unstarted(
                    operation_id, kind, name, before,
                    'conductor %s stopped before it began; nothing was '
                    'changed: run it again' % self.host)
            self.locks.release(name)

    # Hypervisors

    def register_agent(self, host, facts):
        self.db.register_hypervisor(host, facts)

    def hypervisor_state(self, row):
        age = (datetime.datetime.now(datetime.timezone.utc)
               - row.last_seen.replace(tzinfo=datetime.timezone.utc))
        if age.total_seconds() > self.conf.conductor.agent_down_time:
            return 'down'
        return 'up' if row.enabled else 'disabled'

    def list_hypervisors(self):
        counts = {}
        for node in self.db.list_nodes():
            counts[node.hypervisor] = counts.get(node.hypervisor, 0) + 1
        return [dict(row.as_dict(), state=self.hypervisor_state(row),
                     nodes=counts.get(row.host, 0))
                for row in self.db.list_hypervisors()]

    def get_hypervisor(self, host):
        for hypervisor in self.list_hypervisors():
            if hypervisor['host'] == host:
                return hypervisor
        raise exceptions.HypervisorNotFound(host=host)

    def hypervisors(self):
        """The hosts new nodes may go to."""
        if self.bus.embedded:
            return [self.conf.hostagent.host]
        hosts = [h['host'] for h in self.list_hypervisors()
                 if h['state'] == 'up']
        if not hosts:
            raise exceptions.NoValidHost(
                what='any node', reason='no hostagent is up and enabled')
        return hosts

    # Operations

    def deploy(self, spec):
        """Deploy ``spec`` and wait; see submit_deploy and wait."""
        return self.wait(self.submit_deploy(spec))

    def teardown(self, name):
        return self.wait(self.submit_teardown(name))

    def submit_deploy(self, spec):
        """Start creating the cluster ``spec`` describes, or repairing it.

        Idempotent: a re-run with the same spec changes nothing that is as
        recorded. A deploy that a dead process left half done is resumed.
        Checks the spec against the record and locks the cluster, then
        returns the operation id at once: the cloud check, inspection of
        the hypervisors, scheduling and the flow happen inside the
        operation, and their failures are its error.
        """
        name = spec['cluster']
        self._check_accepting()
        self.locks.acquire(name)
        try:
            cluster = self.db.get_cluster(name)
            if cluster is not None and cluster.spec != spec:
                fields = sorted(k for k in set(spec) | set(cluster.spec)
                                if spec.get(k) != cluster.spec.get(k))
                raise exceptions.SpecChanged(name=name,
                                             fields=', '.join(fields))
            before = None if cluster is None else cluster.state
            interrupted = self._interrupted(name)
            if interrupted is not None:
                return self._submit(interrupted.id, 'deploy', name, before,
                                    True, self._resume)
            if cluster is None:
                self.db.save_cluster(name, spec, records.CLUSTER_SCHEDULED)
            operation_id = self._create_operation('deploy', name)
            return self._submit(operation_id, 'deploy', name, before, False,
                                self._run_deploy)
        except BaseException:
            self.locks.release(name)
            raise

    def submit_teardown(self, name):
        """Start removing everything recorded for cluster ``name``."""
        self._check_accepting()
        self.locks.acquire(name)
        try:
            cluster = self.db.get_cluster(name)
            if cluster is None:
                raise exceptions.ClusterNotFound(name=name)
            interrupted = self._interrupted(name)
            if interrupted is not None:
                self.db.finish_operation(interrupted.id, INTERRUPTED)
            operation_id = self._create_operation('teardown', name)
            return self._submit(operation_id, 'teardown', name,
                                cluster.state, False, self._run_teardown)
        except BaseException:
            self.locks.release(name)
            raise

    def delete_hypervisor(self, host):
        """Forget hypervisor ``host``: it must be down and host nothing."""
        hypervisor = self.get_hypervisor(host)
        reasons = []
        if hypervisor['state'] != 'down':
            reasons.append('its hostagent is %s (last heard of at %s)' % (
                hypervisor['state'], hypervisor['last_seen']))
        clusters = sorted({n.cluster for n in
                           self.db.list_nodes(hypervisor=host)}
                          | {r.cluster for r in
                             self.db.list_resources(hypervisor=host)})
        if clusters:
            reasons.append('it hosts resources of cluster(s) %s: tear '
                           'them down first' % ', '.join(clusters))
        if reasons:
            raise exceptions.HypervisorInUse(host=host,
                                             reason='; '.join(reasons))
        self.db.delete_hypervisor(host)

    def wait(self, operation_id):
        """The result of an operation this process runs, once finished.

        Returns {'operation', 'changed', 'resumed'}; raises
        OperationFailed after its rollback, or the error that stopped it
        before its flow ran.
        """
        with self._running_mutex:
            future = self._running.get(operation_id)
        if future is None:
            raise exceptions.OperationNotFound(id=operation_id)
        try:
            return future.result()
        except futures.CancelledError:
            operation = self.db.get_operation(operation_id)
            if operation.error:
                raise exceptions.OperationFailed(operation.error) from None
            # A resumed operation, handed back as it was.
            raise exceptions.OperationFailed(
                operation=operation.kind.capitalize(),
                cluster=operation.cluster,
                reason='conductor %s stopped before it could resume it; it '
                       'resumes when that conductor starts again'
                       % self.host) from None

    def resume_interrupted(self):
        """Resume what this conductor was running when it last stopped."""
        for operation in self.db.list_operations(
                state=db_api.OPERATION_RUNNING, conductor=self.host):
            try:
                self.locks.acquire(operation.cluster)
            except exceptions.ClusterBusy:
                continue
            LOG.info('Resuming %s %s of cluster %s', operation.kind,
                     operation.id, operation.cluster)
            cluster = self.db.get_cluster(operation.cluster)
            try:
                self._submit(operation.id, operation.kind, operation.cluster,
                             None if cluster is None else cluster.state,
                             True, self._resume)
            except exceptions.ConductorBusy:
                self.locks.release(operation.cluster)
                return

    def get_operation(self, operation_id):
        operation = self.db.get_operation(operation_id)
        if operation is None:
            raise exceptions.OperationNotFound(id=operation_id)
        return operation.as_dict()

    def list_operations(self, cluster=None):
        return [o.as_dict() for o in self.db.list_operations(cluster)]

    def get_cluster(self, name):
        cluster = self.db.get_cluster(name)
        if cluster is None:
            raise exceptions.ClusterNotFound(name=name)
        return dict(cluster.as_dict(), nodes=self.list_nodes(name))

    def list_clusters(self):
        return [c.as_dict() for c in self.db.list_clusters()]

    def list_nodes(self, cluster=None):
        return [n.as_dict() for n in self.db.list_nodes(cluster=cluster)]

    def list_events(self, cluster=None, limit=100):
        return [e.as_dict() for e in self.db.list_events(cluster, limit)]

    def _check_accepting(self):
        if not self._accepting:
            raise exceptions.ConductorBusy(
                host=self.host, reason='it is shutting down')

    @contextlib.contextmanager
    def _allocating(self):
        """Scheduling, one at a time across threads and processes."""
        path = os.path.join(self.lock_dir, 'allocation.lock')
        with self._allocation_mutex, fasteners.InterProcessLock(path):
            yield

    def _interrupted(self, name):
        """The last operation a dead process left running, if any.

        Called with the cluster locked, so nothing else runs it now;
        older ones are closed as interrupted.
        """
        running = self.db.list_operations(
            cluster=name, state=db_api.OPERATION_RUNNING)
        for operation in running[:-1]:
            self.db.finish_operation(operation.id, INTERRUPTED)
        if not running:
            return None
        last = running[-1]
        if last.kind != 'deploy':
            self.db.finish_operation(last.id, INTERRUPTED)
            return None
        return last

    def _inspect(self, spec):
        """Ask each hypervisor what it has; fail before creating anything."""
        ports = list(range(spec['ipmi_port_range_start'],
                           spec['ipmi_port_range_end'] + 1))
        facts = {}
        for host in self.hypervisors():
            facts[host] = self.agents.request(
                host, 'inspect', 'inspect/%s' % uuid.uuid4(),
                physnet_mappings=spec['physnet_mappings'],
                ipmi_address=spec['ipmi_address'], ipmi_ports=ports,
                interfaces=[], owner=None)
        missing = {}
        for host, host_facts in facts.items():
            for physnet, source in host_facts['missing_interfaces']:
                missing.setdefault((physnet, source), []).append(host)
        for (physnet, source), hosts in sorted(missing.items()):
            if len(hosts) == len(facts):
                raise exceptions.InterfaceNotFound(
                    'Interface %s mapped to physical network %s does not '
                    'exist on %s' % (source, physnet, ', '.join(hosts)))
        return facts

    def _run_deploy(self, operation_id, on_progress):
        """Check, inspect, schedule, then run the deploy flow.

        A cluster still 'scheduled' is new: until its flow runs, any
        error forgets it with the nodes scheduled for it.
        """
        name = self.db.get_operation(operation_id).cluster
        cluster = self.db.get_cluster(name)
        spec = cluster.spec
        new = cluster.state == records.CLUSTER_SCHEDULED
        missing = []
        try:
            self.cloud.check(cloud_services(spec))
            facts = self._inspect(spec)
            with self._allocating():
                recorded = [n.as_dict() for n in self.db.list_nodes()]
                missing = scheduler.schedule(spec, facts, recorded)
                preflight.check_hosts(
                    self.agents, spec, cluster.uuid, facts,
                    [n for n in recorded if n['cluster'] == name] + missing,
                    [r.as_dict() for r in self.db.list_resources()]
                    + self._planned_elsewhere(name, facts, recorded))
                self.db.add_nodes(missing)
            nodes = [n.as_dict() for n in self.db.list_nodes(cluster=name)]
            plan = plans.deploy_plan(spec, cluster.uuid, nodes, facts)
            return self.runner.run(
                operation_id, 'deploy:%s' % name, deploy.get_deploy_flow,
                {'plan': plan}, self._store(operation_id, name),
                on_progress=on_progress)
        except exceptions.OperationFailed:
            raise
        except Exception:
            # The flow never ran: unschedule what this operation added.
            uuids = [node['uuid'] for node in missing]
            if new:
                uuids = [n.uuid for n in self.db.list_nodes(cluster=name)]
                self.db.delete_cluster(name)
            self.db.delete_nodes(uuids)
            raise

    def _planned_elsewhere(self, name, facts, recorded):
        """The interfaces other clusters' recorded nodes have or will
        have, as resource dicts: a deploy scheduled (its nodes recorded
        under the allocation lock) makes its bridges and taps only when
        its flow runs, after that lock is released."""
        taken = []
        for other in self.db.list_clusters():
            nodes = [n for n in recorded if n['cluster'] == other.name
                     and n['hypervisor'] in facts]
            if other.name == name or not nodes:
                continue
            plan = plans.deploy_plan(other.spec, other.uuid, nodes, facts)
            for host, interfaces in scheduler.planned_interfaces(
                    other.spec, plan).items():
                taken += [{'cluster': other.name, 'hypervisor': host,
                           'kind': 'port' if field.startswith('specs')
                           else 'bridge', 'name': interface}
                          for interface, field in interfaces.items()]
        return taken

    def _run_teardown(self, operation_id, on_progress):
        name = self.db.get_operation(operation_id).cluster
        resources = [
            {'hypervisor': r.hypervisor, 'kind': r.kind, 'name': r.name,
             'remove_args': r.remove_args}
            for r in self.db.list_resources(name)]
        return self.runner.run(
            operation_id, 'teardown:%s' % name, teardown.get_teardown_flow,
            {'cluster': name, 'resources': resources},
            self._store(operation_id, name), on_progress=on_progress)

    def _resume(self, operation_id, on_progress):
        """Resume the flow of an interrupted operation; one interrupted
        before its flow was saved starts again from its checks."""
        try:
            return self.runner.resume(operation_id, on_progress=on_progress)
        except exceptions.NothingToResume:
            operation = self.db.get_operation(operation_id)
            if self.db.get_cluster(operation.cluster) is None:
                raise
        LOG.info('Operation %s had not begun its flow: starting it',
                 operation_id)
        run = (self._run_deploy if operation.kind == 'deploy'
               else self._run_teardown)
        return run(operation_id, on_progress)

    @staticmethod
    def _store(operation_id, name):
        return {'operation_id': operation_id, 'cluster': name}

    def _create_operation(self, kind, name):
        operation_id = str(uuid.uuid4())
        self.db.create_operation(operation_id, name, kind, self.host)
        return operation_id

    def _submit(self, operation_id, kind, name, before, resumed, run, *args):
        """Run ``run(operation_id, *args, on_progress)`` in the pool; the
        cluster's lock is released when it ends. ``before``: the state
        the cluster had, for the failure message (None: this submit
        recorded the cluster).

        Raises ConductorBusy if the conductor is stopping or the start
        cannot be announced; the operation then ends failed, and a
        cluster this submit recorded is forgotten (a resumed operation
        is handed back as it was). The caller releases the lock.
        """
        try:
            if not resumed:
                self.notifier.emit('tenks.cluster.%s.start' % kind, name,
                                   {'operation': operation_id})
            with self._running_mutex:
                self._check_accepting()
                future = self._pool.submit(self._execute, operation_id,
                                           kind, name, before, resumed, run,
                                           *args)
                self._running[operation_id] = future
                self._queued[operation_id] = (kind, name, before, resumed)
        except Exception as e:
            if isinstance(e, (exceptions.ConductorBusy, RuntimeError)):
                # RuntimeError: the pool was shut down.
                reason = 'it is shutting down'
            else:
                LOG.exception('Could not start operation %s', operation_id)
                reason = 'it could not announce operation %s (%s: %s)' % (
                    operation_id, type(e).__name__, e)
            if not resumed:
                self._fail_unstarted(
                    operation_id, kind, name, before,
                    'conductor %s did not start it: %s; nothing was '
                    'changed' % (self.host, reason))
            raise exceptions.ConductorBusy(host=self.host,
                                           reason=reason) from e
        return operation_id

    def _execute(self, operation_id, kind, name, before, resumed, run,
                 *args):
        with self._running_mutex:
            self._queued.pop(operation_id, None)
        progress = ProgressRecorder(self.db, operation_id)
        try:
            outcome = run(operation_id, *args, on_progress=progress)
        except exceptions.OperationFailed as e:
            # The flow ran, and was rolled back.
            error = exceptions.OperationFailed(
                operation=kind.capitalize(), cluster=name,
                reason='%s%s' % (e, self._after_failure(
                    kind, name, before, operation_id)),
                failed_tasks=e.kwargs.get('failed_tasks', []))
            self._fail(operation_id, kind, name, error)
            raise error from None
        except Exception as e:
            # Stopped before its flow ran, or loading the flow failed.
            LOG.debug('Operation %s failed', operation_id, exc_info=True)
            self._fail(operation_id, kind, name, exceptions.OperationFailed(
                operation=kind.capitalize(), cluster=name,
                reason=str(e) or type(e).__name__))
            raise
        finally:
            progress.flush()
            self.locks.release(name)
            with self._running_mutex:
                self._running.pop(operation_id, None)
        result = {'changed': outcome.changed, 'resumed': resumed,
                  'warnings': outcome.warnings}
        for warning in outcome.warnings:
            LOG.warning('Cluster %s: %s', name, warning)
        self.db.finish_operation(operation_id, SUCCEEDED, result=result)
        self.notifier.emit('tenks.cluster.%s.end' % kind, name,
                           {'operation': operation_id,
                            'changed': len(outcome.changed)})
        return dict(result, operation=operation_id)

    def _fail_unstarted(self, operation_id, kind, name, before, reason):
        """End an operation that never began; forget the cluster its
        submit recorded (``before`` None), which nothing was made for."""
        if before is None:
            self.db.delete_cluster(name)
        self._fail(operation_id, kind, name, exceptions.OperationFailed(
            operation=kind.capitalize(), cluster=name, reason=reason))

    def _fail(self, operation_id, kind, name, error):
        self.db.finish_operation(operation_id, FAILED, str(error))
        try:
            self.notifier.emit('tenks.cluster.%s.error' % kind, name,
                               {'operation': operation_id,
                                'error': str(error)}, error=True)
        except Exception:
            # Recorded failed already; the event is only an echo of it.
            LOG.exception('Could not announce the failure of operation %s',
                          operation_id)

    def _after_failure(self, kind, name, before, operation_id):
        if self.db.get_cluster(name) is None:
            return '. Everything this %s created was rolled back' % kind
        if kind == 'teardown':
            left = len(self.db.list_resources(name))
            return ('. %d resource(s) remain recorded: run the teardown '
                    'again to finish it' % left)
        kept = self.db.list_resources(name, operation=operation_id)
        if kept:
            return ('. %d resource(s) this deploy created could not be '
                    'removed (%s); they stay recorded with their nodes: '
                    'run the deploy again, or "tenks teardown %s", to '
                    'finish' % (len(kept), ', '.join(
                        '%s %s' % (r.kind, r.name) for r in kept), name))
        if before == records.CLUSTER_DEPLOYED:
            return ('. What this deploy created was rolled back; the '
                    'cluster deployed before is kept')
        return ('. What this deploy created was rolled back; cluster %s '
                'was not deployed before and stays recorded as failed with '
                '%d resource(s) of earlier operations: run the deploy again, '
                'or "tenks teardown %s"' % (
                    name, len(self.db.list_resources(name)), name))


def cloud_services(spec):
    """The OpenStack services a deploy of ``spec`` talks to."""
    wanted = []
    if any(s.get('ironic_config') for s in spec['specs']):
        wanted.append('baremetal')
    if spec['nova_flavors']:
        wanted.append('compute')
    if spec['wait_for_placement']:
        wanted.append('placement')
    return wanted


class ProgressRecorder:
    """Writes an operation's progress, at most a few times a second."""

    INTERVAL = 0.25

    def __init__(self, db, operation_id):
        self.db = db
        self.operation_id = operation_id
        self.progress = None
        self._written = 0.0

    def __call__(self, progress):
        self.progress = progress
        if time.monotonic() - self._written >= self.INTERVAL:
            self.flush()

    def flush(self):
        if self.progress is not None:
            self.db.set_operation_progress(self.operation_id, self.progress)
            self._written = time.monotonic()


def main():
    from tenks import service
    service.run('conductor', run_conductor)


def run_conductor(conf, bus):
    conductor = Conductor(conf, bus)
    conductor.resume_interrupted()
    return conductor
