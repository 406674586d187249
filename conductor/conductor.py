"""The conductor: runs deploy and teardown flows for clusters.

It reaches hypervisors only through their hostagents, over the bus, and
records everything it creates in the state database as it goes. A
request is checked against the record and its cluster locked at once;
then the operation (cloud check, inspection, scheduling, its flow) runs
in the pool of ``operations``. This module wires the conductor's parts
together and says what a deploy and a teardown run.
"""

import contextlib
import datetime
import os
import threading
import types
import uuid

import fasteners
from oslo_log import log as logging

from conductor import agents
from conductor import aggregates
from conductor import audit as audits
from conductor import hypervisors
from conductor import inspection
from conductor import late
from conductor import locks
from conductor import manager
from conductor import moves
from conductor import operations
from conductor import planner
from conductor import preflight
from conductor import waiters
from flows import context
from hostagent import rpcapi as hostagent_rpcapi
from tenks import constants
from tenks import exceptions
from tenks import fileutils
from tenks import names
from tenks import notifier
from tenks import reconcile
from tenks import resources
from tenks import rpc
from tenks import scheduler
from tenks import states
from tenks.cloud import connection as cloud_connection
from tenks.cloud import placement_aggregates
from tenks.db import api as db_api
from tenks.db import migrations

LOG = logging.getLogger(__name__)

# Seconds between two prunes of the state database by a running
# conductor (it prunes as it starts too).
PRUNE_INTERVAL = 3600
# What a deploy that changes nothing ran: no flow.
NOTHING_CHANGED = types.SimpleNamespace(changed=[], warnings=[], plan=[])
# What a move of nodes that have all gone elsewhere since ran.
NOTHING_MOVED = types.SimpleNamespace(changed=[], warnings=[], plan=[],
                                      moved=0)


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
        engine = db_api.create_engine(
            conf.conductor.database_connection
            or db_api.default_url(self.state_dir))
        if db_api.schema_version(engine) != migrations.HEAD:
            # Once, even when several processes start on a fresh database.
            from tenks.db import migration
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
        self.locks = locks.ClusterLocks(self.lock_dir)
        self.registry = hypervisors.HypervisorRegistry(conf, bus, self.db,
                                                       self.agents)
        self._allocation_mutex = threading.Lock()
        self.aggregates = aggregates.Aggregates(
            self.db, self._allocating,
            conf.scheduler.default_availability_zone, self.cloud)
        self.scheduler_options = scheduler.options_from_conf(conf)
        self.operations = operations.Operations(conf, self.db,
                                                self.notifier, self.locks)
        self.server = bus.get_server(
            rpc.CONDUCTOR_TOPIC, self.host,
            [manager.ConductorManager(self, check_policy)])

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
        persisted, and the next start of this conductor resumes them.
        Returns how many were handed back.
        """
        left = self.drain(grace)
        self._stopping.set()
        self.aggregates.stop_mirror()
        self.server.stop()
        self.server.wait()
        self.operations.shutdown(wait=not left)
        return left

    def drain(self, grace=None):
        """Take no more work and let running operations finish; return
        how many still run after ``grace`` seconds (default:
        graceful_shutdown_timeout), their flows persisted for a resume."""
        if grace is None:
            grace = self.conf.conductor.graceful_shutdown_timeout
        return self.operations.drain(grace)

    # Hypervisors

    def register_agent(self, host, facts):
        self.registry.register_agent(host, facts)

    def hypervisor_state(self, row):
        return self.registry.hypervisor_state(row)

    def list_hypervisors(self):
        return self.registry.list_hypervisors()

    def get_hypervisor(self, host):
        """The hypervisor with its resource provider view: inventories,
        usages, traits, each node's allocations, aggregates and zone."""
        hypervisor = self.registry.get_hypervisor(host)
        nodes = [n.as_dict() for n in self.db.list_nodes(hypervisor=host)]
        where = self.aggregates.host_views().get(host, {})
        return dict(hypervisor, **resources.provider(hypervisor['facts'],
                                                     nodes),
                    aggregates=[a['name'] for a in where.get('aggregates',
                                                             ())],
                    availability_zone=where.get('availability_zone'))

    def update_hypervisor(self, host, enabled, reason=None):
        """Enable or disable ``host`` (a disabled one takes no new
        node); returns it."""
        self.registry.get_hypervisor(host)
        if not isinstance(enabled, bool):
            raise exceptions.HypervisorInvalid(
                host=host, reason='enabled must be true or false, not %r'
                                  % (enabled,))
        if enabled and reason:
            raise exceptions.HypervisorInvalid(
                host=host, reason='a reason is for disabling it')
        self.db.set_hypervisor_enabled(host, enabled, reason)
        return self.get_hypervisor(host)

    # Aggregates (see conductor.aggregates)

    def list_aggregates(self):
        return self.aggregates.list()

    def get_aggregate(self, aggregate):
        return self.aggregates.get(aggregate)

    def create_aggregate(self, name, availability_zone=None):
        return self.aggregates.create(name, availability_zone)

    def update_aggregate(self, aggregate, values):
        """``values``: {name, availability_zone (None: no zone)}."""
        return self.aggregates.update(aggregate, **values)

    def set_aggregate_metadata(self, aggregate, metadata):
        return self.aggregates.set_metadata(aggregate, metadata)

    def delete_aggregate(self, aggregate):
        return self.aggregates.delete(aggregate)

    def add_aggregate_host(self, aggregate, host):
        return self.aggregates.add_host(aggregate, host)

    def remove_aggregate_host(self, aggregate, host):
        return self.aggregates.remove_host(aggregate, host)

    def hypervisors(self):
        """The hosts new nodes may go to."""
        return self.registry.hypervisors()

    def delete_hypervisor(self, host):
        """Forget hypervisor ``host``: it must be down and host nothing."""
        self.registry.delete_hypervisor(host)

    # Host maintenance

    def start_host_maintenance(self, host, reason=None):
        """Put ``host`` into maintenance (disabled: no new nodes) and
        move its nodes to other enabled hosts of its aggregates, one move
        operation per cluster; see _submit_move.

        Returns {'host', 'operations': [ids], 'refused': {cluster:
        reason}} (a cluster busy with another operation is left for a
        later "maintenance start").
        """
        self.registry.get_hypervisor(host)
        self.db.set_hypervisor_maintenance(host, True, reason or
                                           'in maintenance')
        clusters = {}
        for node in self.db.list_nodes(hypervisor=host):
            clusters.setdefault(node.cluster, []).append(node.uuid)
        return self._submit_moves(host, clusters, None)

    def stop_host_maintenance(self, host, rebalance=False):
        """Take ``host`` out of maintenance (enabled); with ``rebalance``,
        move nodes of the other enabled hosts of its aggregates to it
        until they differ by at most one node. Returns what
        start_host_maintenance does."""
        self.registry.get_hypervisor(host)
        self.db.set_hypervisor_maintenance(host, False)
        clusters = {}
        if rebalance:
            nodes = [n.as_dict() for n in self.db.list_nodes()]
            for node in moves.rebalance(host, self.aggregates.host_views(),
                                        nodes):
                clusters.setdefault(node['cluster'], []).append(node['uuid'])
        return self._submit_moves(host, clusters, host)

    def _submit_moves(self, host, clusters, target):
        """Submit a move of the nodes {cluster: [uuid]} (to ``target``,
        or where the scheduler chooses among the aggregate's hosts)."""
        result = {'host': host, 'operations': [], 'refused': {}}
        for name, uuids in sorted(clusters.items()):
            try:
                result['operations'].append(
                    self._submit_move(name, host, uuids, target))
            except (exceptions.ClusterBusy, exceptions.ConductorBusy,
                    exceptions.ChangeRefused) as e:
                result['refused'][name] = str(e)
        return result

    def _submit_move(self, name, host, uuids, target):
        self.operations.check_accepting()
        self.locks.acquire(name)
        try:
            if self.operations.interrupted(name) is not None:
                raise exceptions.ChangeRefused(
                    name=name, reason='a deploy of it was interrupted: run '
                    '"tenks deploy" to finish it first')
            cluster = self.db.get_cluster(name)
            operation_id = self.operations.create('move', name, cluster.spec)
            return self.operations.submit(
                operation_id, 'move', name, cluster.state, False,
                self._run_move, host, uuids, target)
        except BaseException:
            self.locks.release(name)
            raise

    def _run_move(self, operation_id, host, uuids, target, on_progress):
        """Plan the move of the nodes ``uuids`` of the operation's
        cluster (to ``target``, or to other hosts of the aggregates of
        ``host``, their host) and run it."""
        operation = self.db.get_operation(operation_id)
        cluster = self.db.get_cluster(operation.cluster)
        spec = operation.spec
        facts = inspection.inspect(self.agents, self.hypervisors(), spec,
                                   operation_id)
        with self._allocating():
            views = self.aggregates.host_views()
            recorded = [n.as_dict() for n in self.db.list_nodes()]
            # Only deployed nodes still where the request found them: a
            # node half made or removed is its next deploy's business.
            moving = [n for n in recorded if n['uuid'] in uuids
                      and n['state'] == states.NODE_DEPLOYED
                      and n['hypervisor'] != target
                      and (target is not None or n['hypervisor'] == host)]
            if not moving:
                return NOTHING_MOVED
            allowed = ({target} if target is not None
                       else moves.peers(host, views))
            plan = moves.plan_move(
                spec, cluster, facts, recorded + self._moving(),
                [r.as_dict() for r in self.db.list_resources(cluster.name)],
                moving, allowed, views, self.scheduler_options)
            preflight.check_pools(self.agents, plan, operation_id)
            self.db.set_operation_plan(operation_id, plan)
        from flows import move
        outcome = self.runner.run(
            operation_id, 'move:%s' % cluster.name, move.get_move_flow,
            {'operation_id': operation_id},
            self._store(operation_id, cluster.name),
            on_progress=on_progress)
        outcome.moved = moves.moved(plan)
        return outcome

    def _moving(self):
        """Records of the nodes running moves take to their new hosts."""
        return moves.in_flight(self.db.list_operations(
            state=states.OPERATION_RUNNING))

    # Operations

    def deploy(self, spec, force=False):
        """Deploy ``spec`` and wait; see submit_deploy and wait."""
        return self.wait(self.submit_deploy(spec, force))

    def teardown(self, name, force=False):
        """Tear cluster ``name`` down and wait; see submit_teardown."""
        return self.wait(self.submit_teardown(name, force))

    def submit_deploy(self, spec, force=False):
        """Start bringing the cluster to what ``spec`` describes.

        Idempotent: a re-run with the same spec changes nothing that is
        as recorded; a changed spec changes only what differs (see
        tenks.reconcile). ``force``: resize running nodes and remove or
        resize nodes Ironic has deployed. A deploy that a dead process
        left half done is resumed (with its own spec). Locks the cluster,
        then returns the operation id at once: the cloud check,
        inspection of the hypervisors, planning and the flow happen
        inside the operation, and their failures are its error.
        """
        name = spec['cluster']
        self.operations.check_accepting()
        self.locks.acquire(name)
        try:
            cluster = self.db.get_cluster(name)
            before = None if cluster is None else cluster.state
            spec = names.with_physnet_indices(spec, cluster and cluster.spec)
            interrupted = self.operations.interrupted(name)
            if interrupted is not None:
                pending = interrupted.spec or (cluster and cluster.spec)
                # Its bridges' indices are derived, and older records
                # have none.
                changed = sorted(
                    k for k in set(spec) | set(pending or {})
                    if k != 'physnet_indices'
                    and spec.get(k) != pending.get(k)) if pending else []
                if changed:
                    raise exceptions.SpecChanged(name=name,
                                                 fields=', '.join(changed))
                return self.operations.submit(
                    interrupted.id, 'deploy', name, before, True,
                    self._resume)
            if cluster is None:
                cluster = self.db.save_cluster(name, spec,
                                               states.CLUSTER_SCHEDULED)
            operation_id = self.operations.create('deploy', name, spec)
            return self.operations.submit(operation_id, 'deploy', name,
                                          before, False, self._run_deploy,
                                          force, (cluster, spec))
        except BaseException:
            self.locks.release(name)
            raise

    def plan(self, spec, force=False):
        """What a deploy of ``spec`` would change, changing nothing:
        {'cluster', 'changes': [...], 'destructive': bool}."""
        cluster = self.db.get_cluster(spec['cluster'])
        spec = names.with_physnet_indices(spec, cluster and cluster.spec)
        if cluster is None:
            # New: nothing recorded, no deployment yet.
            cluster = types.SimpleNamespace(spec=spec, uuid='-',
                                            state=states.CLUSTER_SCHEDULED)
        try:
            self.cloud.check(cloud_services(spec))
            facts = inspection.inspect(self.agents, self.hypervisors(), spec)
            plan, _ = self._checked_plan(spec, cluster, facts, force)
        except exceptions.TenksError:
            raise
        except Exception as e:
            # One clean error for the caller, not a remote traceback.
            LOG.exception('Plan of cluster %s failed', spec['cluster'])
            raise exceptions.OperationFailed(
                operation='Plan', cluster=spec['cluster'],
                reason='%s: %s' % (type(e).__name__, e)) from e
        return summary(plan)

    def submit_teardown(self, name, force=False):
        """Start removing everything recorded for cluster ``name``.

        Nodes Ironic has deployed (a Nova server on them, or adopted)
        refuse the teardown before anything is removed; ``force``
        removes them all the same (in maintenance, as Ironic requires).
        """
        self.operations.check_accepting()
        self.locks.acquire(name)
        try:
            cluster = self.db.get_cluster(name)
            if cluster is None:
                raise exceptions.ClusterNotFound(name=name)
            interrupted = self.operations.interrupted(name)
            if interrupted is not None:
                self.db.finish_operation(interrupted.id,
                                         states.OPERATION_INTERRUPTED)
            operation_id = self.operations.create('teardown', name)
            return self.operations.submit(operation_id, 'teardown', name,
                                          cluster.state, False,
                                          self._run_teardown, force)
        except BaseException:
            self.locks.release(name)
            raise

    def wait(self, operation_id):
        """The result of an operation this process runs, once finished;
        see Operations.wait."""
        return self.operations.wait(operation_id)

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
        self.operations.resume_interrupted(self._resume)

    def end_orphans(self):
        """End the operations of this host that no process runs and whose
        cluster's record is gone: a teardown killed after its last
        removal, a deploy killed once rolled back. No later operation of
        their cluster would end them; resumed, they end as they ended.
        Returns once they have, their clusters' locks free again."""
        for operation_id in self.operations.resume_interrupted(
                self._resume, lambda operation: self.db.get_cluster(
                    operation.cluster) is None):
            try:
                self.wait(operation_id)
            except exceptions.TenksError:
                pass  # recorded in the operation

    # The audit

    def audit(self, cluster=None, clean=False):
        """The records against what the hypervisors and the cloud hold:
        {'drift', 'other', 'removed'}, see conductor.audit; ``clean``
        removes the leftovers of dead deployments first."""
        return audits.audit(self, cluster, clean)

    # Records

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

    # What a deploy and a teardown run

    @contextlib.contextmanager
    def _allocating(self):
        """Scheduling, one at a time across threads and processes."""
        path = os.path.join(self.lock_dir, 'allocation.lock')
        with self._allocation_mutex, fasteners.InterProcessLock(path):
            yield

    def _run_deploy(self, operation_id, force=False, known=None,
                    on_progress=None):
        """Check, inspect and plan; then apply the plan with a flow, or,
        when it changes nothing, only record the spec. ``known``: the
        cluster's record and the spec, as the submit read them.

        A cluster still 'scheduled' is new: until its flow runs, any
        error forgets it with the nodes scheduled for it.
        """
        if known is None:
            operation = self.db.get_operation(operation_id)
            cluster = self.db.get_cluster(operation.cluster)
            spec = operation.spec or cluster.spec
        else:
            cluster, spec = known
        name = cluster.name
        new = cluster.state == states.CLUSTER_SCHEDULED
        missing = []
        try:
            self.cloud.check(cloud_services(spec))
            facts = inspection.inspect(self.agents, self.hypervisors(), spec,
                                       operation_id)
            with self._allocating():
                plan, missing = self._checked_plan(spec, cluster, facts,
                                                   force, operation_id)
                self.db.add_nodes(missing)
            if not plan['changes']:
                moved = reconcile.moved(plan)
                if moved or (cluster.spec, cluster.state) != (
                        spec, states.CLUSTER_DEPLOYED):
                    self.db.commit_cluster(name, spec,
                                           states.CLUSTER_DEPLOYED, moved)
                return self._join_aggregates(name)
            self.db.set_operation_plan(operation_id, plan)
            from flows import deploy
            outcome = self.runner.run(
                operation_id, 'deploy:%s' % name, deploy.get_deploy_flow,
                {'operation_id': operation_id},
                self._store(operation_id, name), on_progress=on_progress)
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
        outcome.plan = summary(plan)['changes']
        return outcome

    def _checked_plan(self, spec, cluster, facts, force, operation=None):
        """(plan, nodes it schedules) of a deploy of ``spec`` on the
        hypervisors' ``facts``, after every check a deploy makes before
        it changes anything, so that ``tenks plan`` refuses what a
        deploy would: nodes Ironic has deployed left alone (unless
        ``force``), the existing volumes of its nodes there, the names
        the deploy would take free on each hypervisor, and the devices
        of the logical pools it would build fit to take. ``operation``:
        the deploy's (None: a plan)."""
        name = spec['cluster']
        recorded = [n.as_dict() for n in self.db.list_nodes()]
        resources = [r.as_dict() for r in self.db.list_resources()]
        plan, missing = planner.plan_deploy(
            spec, cluster, facts, recorded + self._moving(),
            [r for r in resources if r['cluster'] == name], force,
            self.aggregates.host_views, self.scheduler_options)
        drift = self._drift(plan, spec, operation)
        preflight.check_existing(plan, drift)
        planner.add_drift(plan, drift,
                          self._host_resources(spec, cluster.uuid, facts))
        if not force:
            self._check_deployed(name, plan)
        if plan['changes']:
            preflight.check_hosts(
                self.agents, spec, cluster.uuid, facts,
                [e['new']['record'] for e in plan['nodes']
                 if e['new'] is not None],
                resources + self._planned_elsewhere(name, facts, recorded),
                operation)
            preflight.check_new_nodes(self.agents, plan,
                                      reconcile.bmc_passwords(spec),
                                      operation)
            preflight.check_pools(self.agents, plan, operation)
        return plan, missing

    def _join_aggregates(self, name):
        """A deploy that changes nothing still puts the providers
        nova-compute made since into their aggregates (advisory: its
        warnings)."""
        nodes = placement_aggregates.enrolled(self.db, cluster=name)
        if not nodes or not self.db.list_aggregates():
            return NOTHING_CHANGED
        names = {n.uuid: n.name for n in self.db.list_nodes(cluster=name)
                 if n.uuid in nodes}
        try:
            warnings = placement_aggregates.join(
                self.db, self.cloud.connection, names)
        except Exception as e:
            # The cloud itself is wrong (ConfigError...).
            warnings = ['Placement could not be asked (%s); did not put '
                        'the resource providers of cluster %s into their '
                        'aggregates' % (e, name)]
        if not warnings:
            return NOTHING_CHANGED
        return types.SimpleNamespace(changed=[], warnings=warnings, plan=[])

    @staticmethod
    def _host_resources(spec, deployment, facts):
        """host -> the pool, bridges and uplinks ``spec`` wants there."""
        return lambda host: reconcile.host_resources(spec, deployment, host,
                                                     facts[host])

    def _drift(self, plan, spec, operation=None):
        """What the hypervisors find otherwise than recorded on the nodes
        the plan leaves as they are: {uuid: [[kind, name, what]]}."""
        by_host = {}
        for entry in plan['nodes']:
            if entry['action'] == constants.KEEP:
                by_host.setdefault(entry['hypervisor'], []).append(
                    hostagent_rpcapi.node_request(
                        entry['new'], reconcile.bmc_passwords(spec)))
        found = {}
        for host, nodes in sorted(by_host.items()):
            found.update(self.agents.request(
                host, 'inspect_nodes', 'inspect-nodes/%s' % uuid.uuid4(),
                operation, nodes=nodes, owner=plan['owner'])['nodes'])
        return found

    def _check_deployed(self, name, plan):
        """Refuse to remove or resize nodes Ironic has deployed."""
        uuids = planner.deployed_in_ironic(plan)
        if not uuids:
            return
        from tenks.cloud import ironic
        provision = ironic.provision_states(self.cloud.connection, uuids)
        names = {e['uuid']: e['name'] for e in plan['nodes']}
        busy = ['%s (%s)' % (names[uuid], state)
                for uuid, state in sorted(provision.items())
                if ironic.deployed(state)]
        if busy:
            raise exceptions.NodesDeployed(name=name, nodes=', '.join(busy))

    def _check_in_use(self, name, nodes, resources):
        """Refuse to tear down nodes Ironic has deployed, naming the Nova
        servers on them: Ironic would refuse to delete them half way
        through the teardown."""
        uuids = [r['remove_args']['uuid'] for r in resources
                 if r['kind'] == 'ironic_node']
        if not uuids:
            return
        from tenks.cloud import ironic
        from tenks.cloud import nova
        conn = self.cloud.connection
        names = {n['uuid']: n['name'] for n in nodes}
        in_use = []
        for node_uuid, (state, server) in sorted(ironic.deployed_nodes(
                conn, uuids, states.IRONIC_FREE_STATES).items(),
                key=lambda item: names.get(item[0], item[0])):
            node = names.get(node_uuid, node_uuid)
            if server:
                in_use.append('Nova server %s (%s) runs on node %s' % (
                    nova.server_name(conn, server) or '(name unknown)',
                    server, node))
            else:
                in_use.append('node %s is %s' % (node, state))
        if in_use:
            raise exceptions.NodesInUse(name=name, in_use=', '.join(in_use))

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
            hosts = {host: reconcile.host_setup(other.spec, facts[host])
                     for host in {n['hypervisor'] for n in nodes}}
            for host, interfaces in preflight.planned_interfaces(
                    hosts, nodes).items():
                taken += [{'cluster': other.name, 'hypervisor': host,
                           'kind': 'port' if field.startswith('specs')
                           else 'bridge', 'name': interface}
                          for interface, field in interfaces.items()]
        return taken

    def _run_teardown(self, operation_id, force=False, on_progress=None):
        from flows import teardown
        name = self.db.get_operation(operation_id).cluster
        nodes = [n.as_dict() for n in self.db.list_nodes(cluster=name)]
        resources = [r.as_dict() for r in self.db.list_resources(name)]
        if not force:
            self._check_in_use(name, nodes, resources)
        self.db.set_operation_plan(operation_id, planner.teardown_plan(
            name, nodes, resources, force, self.db.get_cluster(name).state))
        return self.runner.run(
            operation_id, 'teardown:%s' % name, teardown.get_teardown_flow,
            {'operation_id': operation_id},
            self._store(operation_id, name), on_progress=on_progress)


    def _resume(self, operation_id, on_progress):
        """Resume the flow of an interrupted operation; one interrupted
        before its flow was saved starts again from its checks."""
        try:
            outcome = self.runner.resume(operation_id,
                                         on_progress=on_progress)
        except exceptions.NothingToResume:
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
        run = (self._run_deploy if operation.kind == 'deploy'
               else self._run_teardown)
        return run(operation_id, on_progress=on_progress)

    @staticmethod
    def _store(operation_id, name):
        return {'operation_id': operation_id, 'cluster': name}


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


def summary(plan):
    """What callers see of a plan: its changes (no password), whether
    any of them loses something, and notes on what it keeps as it is
    (a physnet isolated everywhere)."""
    return {'cluster': plan['cluster'], 'changes': plan['changes'],
            'destructive': bool(reconcile.destructive(plan)),
            'notes': plan.get('notes', [])}
