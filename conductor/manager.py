"""Server side of the conductor RPC API (see rpcapi for the contract).

Every handler has an oslo.policy rule (tenks.policy), checked on the
caller's request context before it runs: see ``rule``. Each hands the
call to the conductor's room for it (deployments, teardowns,
maintenance, registry, aggregates, records, the audit), which checks its
arguments: the embedded CLI calls this API too, with the same checks
and errors.
"""

import functools

import oslo_messaging as messaging

from conductor import audit as audits
from conductor import rpcapi
from tenks import exceptions
from tenks import policy

RPC_API_VERSION = rpcapi.RPC_API_VERSION

# What starting an operation can raise; everything after (inspection,
# scheduling, the flow) is the operation's error.
SUBMIT_ERRORS = (exceptions.ClusterBusy, exceptions.ConductorBusy)
AGGREGATE_ERRORS = (exceptions.AggregateNotFound,
                    exceptions.AggregateInvalid,
                    exceptions.AggregateConflict,
                    exceptions.HypervisorNotFound)
# What every caller sees of a hypervisor; the rest (facts and what comes
# from them, why it was disabled, its aggregates and zone) is for those
# policy.HYPERVISOR_ADMIN_FIELDS allows.
HYPERVISOR_FIELDS = ('host', 'enabled', 'maintenance', 'last_seen',
                     'answered_at', 'state', 'nodes')


def rule(action, *errors):
    """A handler that runs only if the caller's context passes the
    policy rule ``action``, else raises PolicyNotAuthorized naming it.
    ``errors``: the other errors it raises to its caller. A caller that
    may not see deployment UUIDs gets none, in the answer or an error.
    """
    def decorate(handler):
        @functools.wraps(handler)
        def checked(self, context, *args, **kwargs):
            context = policy.request_context(context)
            self.policy.authorize(action, context)
            if self.policy.allows(policy.DEPLOYMENTS, context):
                return handler(self, context, *args, **kwargs)
            try:
                return policy.hide_deployments(
                    handler(self, context, *args, **kwargs))
            except exceptions.TenksError as e:
                raise policy.hide_deployments_in_error(e) from None
        expecting = messaging.expected_exceptions(
            exceptions.PolicyNotAuthorized, *errors)(checked)
        expecting.rule = action
        return expecting
    return decorate


class ConductorManager:

    target = messaging.Target(version=RPC_API_VERSION)

    def __init__(self, conductor, check_policy=True):
        self.conductor = conductor
        self.policy = (policy.Enforcer(conductor.conf) if check_policy
                       else policy.InProcess())

    # From hostagents

    @rule('tenks:agent:report_result')
    def report_result(self, context, request_id, host, result=None,
                      error=None):
        if not self.conductor.waiters.complete(request_id, host,
                                               result=result, error=error):
            self.conductor.late_results.apply(request_id, host,
                                              result=result, error=error)

    @rule('tenks:agent:register')
    def register_agent(self, context, host, facts):
        self.conductor.registry.register_agent(host, facts)

    # Clusters and their operations

    @rule('tenks:cluster:deploy', exceptions.SpecError,
          exceptions.SpecChanged, *SUBMIT_ERRORS)
    def deploy_cluster(self, context, spec, force=False):
        return self.conductor.deployments.submit(spec, force)

    @rule('tenks:cluster:plan', exceptions.TenksError)
    def plan_cluster(self, context, spec, force=False):
        return self.conductor.deployments.plan(spec, force)

    @rule('tenks:cluster:teardown', exceptions.ClusterNotFound,
          *SUBMIT_ERRORS)
    def teardown_cluster(self, context, name, force=False):
        return self.conductor.teardowns.submit(name, force)

    @rule('tenks:operation:show', exceptions.OperationNotFound)
    def get_operation(self, context, operation_id):
        return self.conductor.records.get_operation(operation_id)

    @rule('tenks:operation:graph', exceptions.OperationNotFound,
          exceptions.OperationHasNoFlow)
    def get_operation_graph(self, context, operation_id):
        from conductor import graphs
        return graphs.operation_graph(self.conductor.db, operation_id)

    @rule('tenks:operation:list')
    def list_operations(self, context, cluster=None):
        return self.conductor.records.list_operations(cluster)

    @rule('tenks:cluster:show', exceptions.ClusterNotFound)
    def get_cluster(self, context, name):
        return self._cluster_view(context,
                                  self.conductor.records.get_cluster(name))

    @rule('tenks:cluster:list')
    def list_clusters(self, context):
        return [self._cluster_view(context, cluster)
                for cluster in self.conductor.records.list_clusters()]

    @rule('tenks:node:list', exceptions.NodeNotFound,
          exceptions.ListingInvalid)
    def list_nodes(self, context, cluster=None, limit=None, marker=None,
                   sort_key=None, sort_dir=None):
        return self.conductor.records.list_nodes(cluster, limit, marker,
                                                 sort_key, sort_dir)

    @rule('tenks:event:list')
    def list_events(self, context, cluster=None, limit=100):
        return self.conductor.records.list_events(cluster, limit)

    def _cluster_view(self, context, cluster):
        if self.policy.allows(policy.DEPLOYMENTS, context):
            return cluster
        return {k: v for k, v in cluster.items() if k != 'uuid'}

    # BMC faults

    @rule('tenks:node:fault:set', exceptions.TenksError)
    def set_bmc_fault(self, context, node, kind, duration=None,
                      probability=None, cluster=None):
        return self.conductor.bmc_faults.set(node, kind, duration,
                                             probability, cluster)

    @rule('tenks:node:fault:clear', exceptions.TenksError)
    def clear_bmc_fault(self, context, node=None, cluster=None,
                        all_nodes=False):
        return self.conductor.bmc_faults.clear(node, cluster, all_nodes)

    # The audit

    @rule('tenks:audit')
    def audit(self, context, cluster=None, clean=False):
        return audits.audit(self.conductor, cluster, clean)

    # Conductors

    @rule('tenks:conductor:list')
    def list_conductors(self, context):
        return self.conductor.conductors()

    # Hypervisors

    @rule('tenks:hypervisor:list')
    def list_hypervisors(self, context):
        return [self._hypervisor_view(context, hypervisor)
                for hypervisor in self.conductor.registry.list_hypervisors()]

    @rule('tenks:hypervisor:show', exceptions.HypervisorNotFound)
    def get_hypervisor(self, context, host):
        return self._hypervisor_view(context,
                                     self.conductor.registry.describe(host))

    @rule('tenks:hypervisor:delete', exceptions.HypervisorNotFound,
          exceptions.HypervisorInUse)
    def delete_hypervisor(self, context, host):
        return self.conductor.registry.delete_hypervisor(host)

    @rule('tenks:hypervisor:update', exceptions.HypervisorNotFound,
          exceptions.HypervisorInvalid)
    def update_hypervisor(self, context, host, enabled, reason=None):
        return self._hypervisor_view(
            context, self.conductor.registry.update_hypervisor(
                host, enabled, reason))

    @rule('tenks:hypervisor:maintenance', exceptions.HypervisorNotFound)
    def start_host_maintenance(self, context, host, reason=None):
        return self.conductor.maintenance.start(host, reason)

    @rule('tenks:hypervisor:maintenance', exceptions.HypervisorNotFound)
    def stop_host_maintenance(self, context, host, rebalance=False):
        return self.conductor.maintenance.stop(host, rebalance)

    def _hypervisor_view(self, context, hypervisor):
        if self.policy.allows(policy.HYPERVISOR_ADMIN_FIELDS, context):
            return hypervisor
        return {k: hypervisor[k] for k in HYPERVISOR_FIELDS}

    # Aggregates

    @rule('tenks:aggregate:list', *AGGREGATE_ERRORS)
    def list_aggregates(self, context):
        return self.conductor.aggregates.list()

    @rule('tenks:aggregate:show', *AGGREGATE_ERRORS)
    def get_aggregate(self, context, aggregate):
        return self.conductor.aggregates.get(aggregate)

    @rule('tenks:aggregate:create', *AGGREGATE_ERRORS)
    def create_aggregate(self, context, name, availability_zone=None):
        return self.conductor.aggregates.create(name, availability_zone)

    @rule('tenks:aggregate:update', *AGGREGATE_ERRORS)
    def update_aggregate(self, context, aggregate, values):
        return self.conductor.aggregates.update(aggregate, values)

    @rule('tenks:aggregate:set_metadata', *AGGREGATE_ERRORS)
    def set_aggregate_metadata(self, context, aggregate, metadata):
        return self.conductor.aggregates.set_metadata(aggregate, metadata)

    @rule('tenks:aggregate:delete', *AGGREGATE_ERRORS)
    def delete_aggregate(self, context, aggregate):
        return self.conductor.aggregates.delete(aggregate)

    @rule('tenks:aggregate:add_host', *AGGREGATE_ERRORS)
    def add_aggregate_host(self, context, aggregate, host):
        return self.conductor.aggregates.add_host(aggregate, host)

    @rule('tenks:aggregate:remove_host', *AGGREGATE_ERRORS)
    def remove_aggregate_host(self, context, aggregate, host):
        return self.conductor.aggregates.remove_host(aggregate, host)
