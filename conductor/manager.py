"""Server side of the conductor RPC API (see rpcapi for the contract)."""

import oslo_messaging as messaging

from conductor import rpcapi
from tenks import exceptions
from tenks import policy

RPC_API_VERSION = rpcapi.RPC_API_VERSION

# What starting an operation can raise; everything after (inspection,
# scheduling, the flow) is the operation's error.
SUBMIT_ERRORS = (exceptions.ClusterBusy, exceptions.ConductorBusy)
AGGREGATE_ERRORS = (exceptions.PolicyNotAuthorized,
                    exceptions.AggregateNotFound,
                    exceptions.AggregateInvalid,
                    exceptions.AggregateConflict,
                    exceptions.HypervisorNotFound)


def validate(spec, source):
    # The validator (jsonschema, os-traits) loads with the first spec: an
    # embedded teardown needs none.
    from tenks import spec as tenks_spec
    return tenks_spec.validate(spec, source=source)


class ConductorManager:

    target = messaging.Target(version=RPC_API_VERSION)

    def __init__(self, conductor):
        self.conductor = conductor
        self.policy = policy.Enforcer(conductor.conf)

    def report_result(self, context, request_id, host, result=None,
                      error=None):
        if not self.conductor.waiters.complete(request_id, host,
                                               result=result, error=error):
            self.conductor.late_results.apply(request_id, host,
                                              result=result, error=error)

    def register_agent(self, context, host, facts):
        self.conductor.register_agent(host, facts)

    @messaging.expected_exceptions(exceptions.SpecError,
                                   exceptions.SpecChanged, *SUBMIT_ERRORS)
    def deploy_cluster(self, context, spec, force=False):
        spec = validate(spec, 'deploy_cluster request')
        return self.conductor.submit_deploy(spec, force)

    @messaging.expected_exceptions(exceptions.TenksError)
    def plan_cluster(self, context, spec, force=False):
        spec = validate(spec, 'plan_cluster request')
        return self.conductor.plan(spec, force)

    @messaging.expected_exceptions(exceptions.ClusterNotFound,
                                   *SUBMIT_ERRORS)
    def teardown_cluster(self, context, name, force=False):
        return self.conductor.submit_teardown(name, force)

    @messaging.expected_exceptions(exceptions.OperationNotFound)
    def get_operation(self, context, operation_id):
        return self.conductor.get_operation(operation_id)

    def list_operations(self, context, cluster=None):
        return self.conductor.list_operations(cluster)

    @messaging.expected_exceptions(exceptions.ClusterNotFound)
    def get_cluster(self, context, name):
        return self.conductor.get_cluster(name)

    def list_clusters(self, context):
        return self.conductor.list_clusters()

    def list_nodes(self, context, cluster=None):
        return self.conductor.list_nodes(cluster)

    def list_hypervisors(self, context):
        return self.conductor.list_hypervisors()

    @messaging.expected_exceptions(exceptions.HypervisorNotFound)
    def get_hypervisor(self, context, host):
        return self.conductor.get_hypervisor(host)

    @messaging.expected_exceptions(exceptions.HypervisorNotFound,
                                   exceptions.HypervisorInUse)
    def delete_hypervisor(self, context, host):
        return self.conductor.delete_hypervisor(host)

    def list_events(self, context, cluster=None, limit=100):
        return self.conductor.list_events(cluster, limit)

    # Admin only (tenks.policy): the caller's request context is checked.

    @messaging.expected_exceptions(exceptions.PolicyNotAuthorized,
                                   exceptions.HypervisorNotFound,
                                   exceptions.HypervisorInvalid)
    def update_hypervisor(self, context, host, enabled, reason=None):
        self.policy.authorize('tenks:hypervisor:update', context)
        return self.conductor.update_hypervisor(host, enabled, reason)

    @messaging.expected_exceptions(exceptions.PolicyNotAuthorized,
                                   exceptions.HypervisorNotFound)
    def start_host_maintenance(self, context, host, reason=None):
        self.policy.authorize('tenks:hypervisor:maintenance', context)
        return self.conductor.start_host_maintenance(host, reason)

    @messaging.expected_exceptions(exceptions.PolicyNotAuthorized,
                                   exceptions.HypervisorNotFound)
    def stop_host_maintenance(self, context, host, rebalance=False):
        self.policy.authorize('tenks:hypervisor:maintenance', context)
        return self.conductor.stop_host_maintenance(host, bool(rebalance))

    @messaging.expected_exceptions(*AGGREGATE_ERRORS)
    def list_aggregates(self, context):
        self.policy.authorize('tenks:aggregate:list', context)
        return self.conductor.list_aggregates()

    @messaging.expected_exceptions(*AGGREGATE_ERRORS)
    def get_aggregate(self, context, aggregate):
        self.policy.authorize('tenks:aggregate:show', context)
        return self.conductor.get_aggregate(aggregate)

    @messaging.expected_exceptions(*AGGREGATE_ERRORS)
    def create_aggregate(self, context, name, availability_zone=None):
        self.policy.authorize('tenks:aggregate:create', context)
        return self.conductor.create_aggregate(name, availability_zone)

    @messaging.expected_exceptions(*AGGREGATE_ERRORS)
    def update_aggregate(self, context, aggregate, values):
        self.policy.authorize('tenks:aggregate:update', context)
        if not isinstance(values, dict):
            raise exceptions.AggregateInvalid(
                aggregate=aggregate, reason='values must be a mapping')
        unknown = set(values) - {'name', 'availability_zone'}
        if unknown:
            raise exceptions.AggregateInvalid(
                aggregate=aggregate, reason='cannot change %s' % ', '.join(
                    sorted(unknown)))
        return self.conductor.update_aggregate(aggregate, values)

    @messaging.expected_exceptions(*AGGREGATE_ERRORS)
    def set_aggregate_metadata(self, context, aggregate, metadata):
        self.policy.authorize('tenks:aggregate:set_metadata', context)
        return self.conductor.set_aggregate_metadata(aggregate, metadata)

    @messaging.expected_exceptions(*AGGREGATE_ERRORS)
    def delete_aggregate(self, context, aggregate):
        self.policy.authorize('tenks:aggregate:delete', context)
        return self.conductor.delete_aggregate(aggregate)

    @messaging.expected_exceptions(*AGGREGATE_ERRORS)
    def add_aggregate_host(self, context, aggregate, host):
        self.policy.authorize('tenks:aggregate:add_host', context)
        return self.conductor.add_aggregate_host(aggregate, host)

    @messaging.expected_exceptions(*AGGREGATE_ERRORS)
    def remove_aggregate_host(self, context, aggregate, host):
        self.policy.authorize('tenks:aggregate:remove_host', context)
        return self.conductor.remove_aggregate_host(aggregate, host)
