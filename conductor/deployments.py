"""Deploys and plans: bringing a cluster to what its spec describes.

A deploy is checked against the record and its cluster locked as it is
submitted; the cloud check, inspection of the hypervisors, scheduling
and the flow run inside the operation (see conductor.operations), and
their failures are its error. A plan makes every check a deploy makes
before it changes anything, and changes nothing.
"""

import types
import uuid

from oslo_log import log as logging

from conductor import inspection
from conductor import planner
from conductor import preflight
from hostagent import rpcapi as hostagent_rpcapi
from tenks import constants
from tenks import exceptions
from tenks import names
from tenks import reconcile
from tenks import states
from tenks.cloud import placement_aggregates

LOG = logging.getLogger(__name__)

# What a deploy that changes nothing ran: no flow.
NOTHING_CHANGED = types.SimpleNamespace(changed=[], warnings=[], plan=[])


def validate(spec, source):
    # The validator (jsonschema, os-traits) loads with the first spec: an
    # embedded teardown needs none.
    from tenks import spec as tenks_spec
    return tenks_spec.validate(spec, source=source)


class Deployments:
    """Deploys and plans of the conductor ``conductor`` (its database,
    hostagents, operations, scheduler and cloud)."""

    def __init__(self, conductor):
        self.conductor = conductor
        self.db = conductor.db
        self.agents = conductor.agents
        self.cloud = conductor.cloud
        self.operations = conductor.operations
        self.registry = conductor.registry

    def deploy(self, spec, force=False):
        """Deploy ``spec`` and wait; see submit."""
        return self.operations.wait(self.submit(spec, force))

    def submit(self, spec, force=False):
        """Start bringing the cluster to what ``spec`` describes.

        Idempotent: a re-run with the same spec changes nothing that is
        as recorded; a changed spec changes only what differs (see
        tenks.reconcile). ``force``: resize running nodes and remove or
        resize nodes Ironic has deployed. A deploy that a dead process
        left half done is resumed (with its own spec). Locks the cluster,
        then returns the operation id at once.
        """
        spec = validate(spec, 'deploy request')
        name = spec['cluster']
        with self.operations.start(name):
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
                    self.conductor.resume)
            if cluster is None:
                cluster = self.db.save_cluster(name, spec,
                                               states.CLUSTER_SCHEDULED)
            operation_id = self.operations.create('deploy', name, spec)
            return self.operations.submit(operation_id, 'deploy', name,
                                          before, False, self.run, force,
                                          known=(cluster, spec))

    def plan(self, spec, force=False):
        """What a deploy of ``spec`` would change, changing nothing:
        {'cluster', 'changes': [...], 'destructive': bool, 'notes'}."""
        spec = validate(spec, 'plan request')
        cluster = self.db.get_cluster(spec['cluster'])
        spec = names.with_physnet_indices(spec, cluster and cluster.spec)
        if cluster is None:
            # New: nothing recorded, no deployment yet.
            cluster = types.SimpleNamespace(spec=spec, uuid='-',
                                            state=states.CLUSTER_SCHEDULED)
        try:
            check_cloud(self.cloud, spec)
            facts = inspection.inspect(self.agents,
                                       self.registry.hypervisors(), spec)
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

    def run(self, operation_id, force=False, on_progress=None, known=None):
        """Check, inspect and plan; then apply the plan with a flow, or,
        when it changes nothing, only record the spec (the operation's,
        as its submit recorded it). ``known``: the cluster's record and
        the spec, as the submit read them (else read here).

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
            check_cloud(self.cloud, spec)
            facts = inspection.inspect(self.agents,
                                       self.registry.hypervisors(), spec,
                                       operation_id)
            with self.conductor.allocating():
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
            outcome = self.conductor.runner.run(
                operation_id, 'deploy:%s' % name, deploy.get_deploy_flow,
                {'operation_id': operation_id},
                self.conductor.store(operation_id, name),
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
            spec, cluster, facts, recorded + self.conductor.moving(),
            [r for r in resources if r['cluster'] == name], force,
            self.conductor.aggregates.host_views,
            self.conductor.scheduler_options)
        drift = self._drift(plan, spec, operation)
        preflight.check_existing(plan, drift)
        planner.add_drift(plan, drift,
                          _host_resources(spec, cluster.uuid, facts))
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
        node_names = {n.uuid: n.name
                      for n in self.db.list_nodes(cluster=name)
                      if n.uuid in nodes}
        try:
            warnings = placement_aggregates.join(
                self.db, self.cloud.connection, node_names)
        except Exception as e:
            # The cloud itself is wrong (ConfigError...).
            warnings = ['Placement could not be asked (%s); did not put '
                        'the resource providers of cluster %s into their '
                        'aggregates' % (e, name)]
        if not warnings:
            return NOTHING_CHANGED
        return types.SimpleNamespace(changed=[], warnings=warnings, plan=[])

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
        node_names = {e['uuid']: e['name'] for e in plan['nodes']}
        busy = ['%s (%s)' % (node_names[uuid], state)
                for uuid, state in sorted(provision.items())
                if ironic.deployed(state)]
        if busy:
            raise exceptions.NodesDeployed(name=name, nodes=', '.join(busy))

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


def _host_resources(spec, deployment, facts):
    """host -> the pool, bridges and uplinks ``spec`` wants there."""
    return lambda host: reconcile.host_resources(spec, deployment, host,
                                                 facts[host])


def enrolled_drivers(spec):
    """{Ironic driver: [where the spec enrols nodes with it]}."""
    wanted = {}
    for index, entry in enumerate(spec['specs']):
        if entry.get('ironic_config') is None:
            continue
        node_type = spec['node_types'][entry['type']]
        driver = node_type.get('ironic_driver',
                               spec['default_ironic_driver'])
        wanted.setdefault(driver, []).append(
            'specs[%d], node type %s' % (index, entry['type']))
    return wanted


def check_cloud(cloud, spec):
    """The services a deploy of ``spec`` needs answer, and Ironic
    enables the drivers it enrols nodes with."""
    services = cloud_services(spec)
    cloud.check(services)
    if 'baremetal' in services:
        cloud.check_ironic_drivers(enrolled_drivers(spec))


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
