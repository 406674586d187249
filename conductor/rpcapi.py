"""Client side of the conductor RPC API, for hostagents, the CLI and other
OpenStack services.

Long operations (deploy, teardown) return an operation id at once, once
the spec is checked and the cluster locked; follow them with
get_operation. Everything after that (inspecting the hypervisors,
reaching the cloud, scheduling, the flow) is the operation's work: its
failure ends the operation in state 'failed' with the reason in its
``error``. The errors a call itself can raise arrive as the same types
from tenks.exceptions, and they are all a caller can get:

* deploy_cluster: SpecError (invalid spec), SpecChanged (an interrupted
  deploy of the cluster has another spec), ClusterBusy, ConductorBusy;
* plan_cluster: any TenksError saying why no plan can be made (SpecError,
  ChangeRefused, NoValidHost, InterfaceNotFound, AgentTimeout,
  CloudError, ...): it inspects the hypervisors before it answers;
* teardown_cluster: ClusterNotFound, ClusterBusy, ConductorBusy;
* get_operation: OperationNotFound; get_operation_graph:
  OperationNotFound, OperationHasNoFlow; get_cluster: ClusterNotFound;
  get_hypervisor: HypervisorNotFound;
* delete_hypervisor: HypervisorNotFound, HypervisorInUse;
* the admin calls of 1.3 (aggregates, update_hypervisor):
  PolicyNotAuthorized (the context's roles are not allowed),
  AggregateNotFound, AggregateInvalid (a bad value), AggregateConflict
  (a rule of aggregates refuses the change), HypervisorNotFound,
  HypervisorInvalid;
* start_host_maintenance, stop_host_maintenance (1.4, admin):
  PolicyNotAuthorized, HypervisorNotFound;
* every call (1.5): PolicyNotAuthorized, naming the rule the caller's
  context does not pass.
* audit (1.6, admin): PolicyNotAuthorized only; what it cannot read is
  an ``unchecked`` entry of its answer.

During a rolling upgrade the client sends no message newer than the
cap [upgrade_levels] conductor of its bus's configuration sets (the
oldest conductor's version; see tenks.rpc.Bus.get_client). Each call is
sent at the oldest version that carries it, so most are 1.0's;
deploy_cluster and teardown_cluster send ``force`` only when it is
true. A call the cap does not allow (a method newer than it, or
``force`` before 1.2 or 1.4: an older conductor would refuse it, and it
cannot be left out) raises VersionCapped, naming it, the version it
needs and the cap, before anything is sent.

API version history:

* 1.0 - Initial version: report_result and register_agent (casts from
  hostagents); deploy_cluster, teardown_cluster, get_cluster,
  list_clusters, list_nodes, get_operation, list_operations,
  list_hypervisors, get_hypervisor, list_events.
* 1.1 - delete_hypervisor. deploy_cluster and teardown_cluster raise
  only the errors listed above: inspection and scheduling errors
  (NoValidHost, InterfaceNotFound, AgentTimeout, ...) are the
  operation's.
* 1.2 - plan_cluster: what deploy_cluster would change, changing
  nothing. deploy_cluster applies a changed spec (it used to raise
  SpecChanged) and takes ``force``: resize running nodes, remove or
  resize nodes Ironic has deployed.
* 1.3 - Host aggregates and availability zones: list_aggregates,
  get_aggregate, create_aggregate, update_aggregate,
  set_aggregate_metadata, delete_aggregate, add_aggregate_host,
  remove_aggregate_host; and update_hypervisor (enable or disable a
  hypervisor). These are admin calls: each carries the caller's
  oslo.context request context, checked against the oslo.policy rules
  of tenks.policy (default: the admin role). get_hypervisor also returns
  the hypervisor's inventories, usages, traits, allocations, aggregates
  and availability zone.
* 1.4 - Host maintenance: start_host_maintenance (the hypervisor is
  disabled and its nodes move to other enabled hosts of its aggregates)
  and stop_host_maintenance (enabled again; ``rebalance`` moves nodes
  back). Admin calls. Each returns {'host', 'operations': [ids of the
  move operations, one per cluster], 'refused': {cluster: reason}}; a
  move's failure is its operation's. Hypervisors have ``maintenance``,
  and the state 'maintenance'. add_aggregate_host and
  remove_aggregate_host also return ``warnings``, and delete_aggregate
  returns {'warnings': [...]}: what Placement refused while the resource
  providers of the host's enrolled nodes followed the change (advisory;
  the change stands).
  teardown_cluster takes ``force``: remove nodes Ironic has deployed (a
  Nova server on them) too; without it such a teardown ends failed with
  NodesInUse, naming the servers, before anything is removed.
* 1.5 - Every call is checked against a rule of tenks.policy on the
  caller's context, and every client method takes that context first:
  readers (role reader, member or admin) read, members deploy, plan and
  tear down, admins manage hypervisors (delete_hypervisor included) and
  aggregates; report_result and register_agent need the service role
  (hostagents send policy.service_context()). A call without a context
  (an older client's) is anonymous: refused with PolicyNotAuthorized
  naming the rule (a refused cast changes nothing). Callers
  that are not admins get list_hypervisors and get_hypervisor without
  the admin-only fields (facts, disabled_reason, inventories, usages,
  traits, allocations, aggregates, availability_zone), clusters without
  their ``uuid``, and ``***`` for the deployment UUID of every owner mark in
  an answer or error (an operation's error or warnings, say).
* 1.6 - audit (admin): the records against what the hypervisors and the
  cloud hold, everything that carries a Tenks mark included; with
  ``clean``, what dead deployments left is removed first. Returns
  {'drift', 'other', 'removed'}: lists of {'hypervisor', 'kind',
  'name', 'status', 'cluster', 'mark', 'detail'} (see conductor.audit).
* 1.7 - list_conductors: the live conductors, each {'host',
  'started_at', 'heartbeat_at', 'jobs'} (the ids of the operations it
  runs); with a jobboard, every conductor that shares it.
* 1.8 - list_nodes takes limit, marker (the UUID of the last node of
  the page before), sort_key and sort_dir: a page of a big cluster
  costs what its own nodes cost. ListingInvalid names a bad argument,
  NodeNotFound a marker that is no node's.
* 1.9 - get_operation_graph: the operation's flow as TaskFlow runs it,
  {'id', 'kind', 'cluster', 'state', 'nodes': [{'name', 'kind',
  'state'}], 'edges': [[from, to]]} (see conductor.graphs), each task
  with its state ('done', 'failed', 'reverted', 'pending', ..., or null
  when not known). OperationNotFound; OperationHasNoFlow for one that
  built no flow. An operation that failed in its flow has the tasks
  whose failure rolled it back in ``failed_tasks`` of its result.
* 1.10 - BMC faults (admin): set_bmc_fault makes a node's IPMI,
  Redfish or SNMP BMC misbehave (tenks.bmc_faults) until clear_bmc_fault; the
  node (list_nodes, get_cluster) has ``bmc_fault``, the fault its BMC
  shows or None. Errors: NodeNotFound, NodeAmbiguous, BmcFaultInvalid,
  and what the node's hostagent raised (AgentTimeout, DriverError...).
"""

import functools

from tenks import policy
from tenks import rpc

RPC_API_VERSION = '1.10'


class ConductorAPI:
    """Each method takes the caller's oslo.context RequestContext (or
    its dict) first: the conductor checks it against the method's rule
    of tenks.policy. Hostagents send policy.service_context(); a service
    forwards its user's context."""

    def __init__(self, bus, timeout=None, retry=None):
        """``timeout``: of each call (default: rpc_response_timeout);
        ``retry``: how many times a call is sent again while the broker
        cannot be reached (default: until it can)."""
        self.bus = bus
        self.client = bus.get_client(rpc.CONDUCTOR_TOPIC, RPC_API_VERSION)
        if timeout is not None:
            self.client = self.client.prepare(timeout=timeout)
        if retry is not None:
            self.client = self.client.prepare(retry=retry)

    @functools.cached_property
    def _results(self):
        """The client of report_result (a hostagent's only)."""
        return self.bus.get_client(rpc.CONDUCTOR_TOPIC, RPC_API_VERSION,
                                   delivered=True)

    def _call(self, context, method, version='1.0', newer=(), **kwargs):
        """Call ``method`` at ``version``; ``newer``: the optional
        arguments that need it (VersionCapped names them)."""
        with rpc.capped(rpc.CONDUCTOR_TOPIC, method, newer):
            return self.client.prepare(version=version).call(
                policy.to_dict(context), method, **kwargs)

    # From hostagents

    def report_result(self, context, conductor, request_id, host,
                      result=None, error=None):
        """Hand the outcome of ``request_id`` to the conductor waiting.
        Raises one of rpc.UNDELIVERED if the bus does not take it (see
        there)."""
        cctxt = rpc.delivered(self._results, server=conductor,
                              version='1.0')
        with rpc.capped(rpc.CONDUCTOR_TOPIC, 'report_result'):
            cctxt.cast(policy.to_dict(context), 'report_result',
                       request_id=request_id, host=host, result=result,
                       error=error)

    def register_agent(self, context, host, facts):
        """Register or heartbeat hostagent ``host`` with its facts."""
        with rpc.capped(rpc.CONDUCTOR_TOPIC, 'register_agent'):
            self.client.prepare(version='1.0').cast(
                policy.to_dict(context), 'register_agent', host=host,
                facts=facts)

    # For operators and other services

    def deploy_cluster(self, context, spec, force=False):
        """Start deploying ``spec`` (a dict); return its operation id."""
        if force:
            # Never left out for an older conductor: it changes what
            # the deploy may do.
            return self._call(context, 'deploy_cluster', '1.2', ['force'],
                              spec=spec, force=True)
        return self._call(context, 'deploy_cluster', spec=spec)

    def plan_cluster(self, context, spec, force=False):
        """What deploying ``spec`` would change: {'cluster', 'changes':
        [{'node', 'hypervisor', 'resource', 'action', 'field', 'old',
        'new'}], 'destructive': bool, 'notes': [str]} (notes: what it
        keeps as it is and a user may not expect, such as a physnet
        that no hypervisor maps)."""
        return self._call(context, 'plan_cluster', version='1.2', spec=spec,
                          force=force)

    def teardown_cluster(self, context, name, force=False):
        """Start tearing cluster ``name`` down; return its operation id.
        ``force``: remove nodes Ironic has deployed too."""
        if force:
            return self._call(context, 'teardown_cluster', '1.4', ['force'],
                              name=name, force=True)
        return self._call(context, 'teardown_cluster', name=name)

    def get_operation(self, context, operation_id):
        """State ('running', 'succeeded', 'failed', 'interrupted'),
        progress per stage ({stage: [done, total]}) and error."""
        return self._call(context, 'get_operation',
                          operation_id=operation_id)

    def get_operation_graph(self, context, operation_id):
        """The operation's flow, each task with its state (see 1.9);
        tenks.flow_graph.dot draws it."""
        return self._call(context, 'get_operation_graph', '1.9',
                          operation_id=operation_id)

    def list_operations(self, context, cluster=None):
        return self._call(context, 'list_operations', cluster=cluster)

    def get_cluster(self, context, name):
        """The cluster, its spec (password masked) and its nodes."""
        return self._call(context, 'get_cluster', name=name)

    def list_clusters(self, context):
        return self._call(context, 'list_clusters')

    def list_nodes(self, context, cluster=None, limit=None, marker=None,
                   sort_key=None, sort_dir=None):
        """The nodes (of ``cluster``) by cluster and name. Since 1.8, a
        page: ``limit`` nodes at most, after the node of UUID ``marker``,
        by ``sort_key`` (see tenks.constants.NODE_SORT_KEYS) in
        ``sort_dir``."""
        paging = {k: v for k, v in (
            ('limit', limit), ('marker', marker), ('sort_key', sort_key),
            ('sort_dir', sort_dir)) if v is not None}
        if paging:
            return self._call(context, 'list_nodes', '1.8', list(paging),
                              cluster=cluster, **paging)
        return self._call(context, 'list_nodes', cluster=cluster)

    def list_hypervisors(self, context):
        return self._call(context, 'list_hypervisors')

    def list_conductors(self, context):
        return self._call(context, 'list_conductors', '1.7')

    def get_hypervisor(self, context, host):
        return self._call(context, 'get_hypervisor', host=host)

    def delete_hypervisor(self, context, host):
        """Forget hypervisor ``host``, which must be down and host no
        node nor any other resource."""
        return self._call(context, 'delete_hypervisor', version='1.1',
                          host=host)

    def list_events(self, context, cluster=None, limit=100):
        return self._call(context, 'list_events', cluster=cluster,
                          limit=limit)

    # Admin calls

    def set_bmc_fault(self, context, node, kind, duration=None,
                      probability=None, cluster=None):
        """Make the BMC of ``node`` (name or UUID; ``cluster`` when
        several have a node of that name) show a fault of ``kind`` (see
        tenks.bmc_faults: ``duration`` is the delay of ``slow``,
        ``probability`` the failure rate of ``flaky``); the node."""
        return self._call(context, 'set_bmc_fault', '1.10', node=node,
                          kind=kind, duration=duration,
                          probability=probability, cluster=cluster)

    def clear_bmc_fault(self, context, node=None, cluster=None,
                        all_nodes=False):
        """Clear the fault of ``node``'s BMC, or (``all_nodes``) of every
        node (of ``cluster``) with one: {'cleared': [names], 'failed':
        {name: why}}."""
        return self._call(context, 'clear_bmc_fault', '1.10', node=node,
                          cluster=cluster, all_nodes=all_nodes)

    def audit(self, context, cluster=None, clean=False):
        """The audit of every hypervisor and service (what concerns
        ``cluster`` only, if given): {'drift': [...], 'other': [...],
        'removed': [...]}; ``clean``: remove the leftovers of dead
        deployments first. See conductor.audit."""
        return self._call(context, 'audit', '1.6', cluster=cluster,
                          clean=clean)

    def start_host_maintenance(self, context, host, reason=None):
        """Disable ``host`` and move its nodes away; see 1.4."""
        return self._call(context, 'start_host_maintenance', '1.4',
                          host=host, reason=reason)

    def stop_host_maintenance(self, context, host, rebalance=False):
        """Enable ``host``; with ``rebalance`` move nodes back to it."""
        return self._call(context, 'stop_host_maintenance', '1.4',
                          host=host, rebalance=rebalance)

    def update_hypervisor(self, context, host, enabled, reason=None):
        """Enable or disable ``host``; a disabled one takes no new node."""
        return self._call(context, 'update_hypervisor', '1.3', host=host,
                          enabled=enabled, reason=reason)

    def list_aggregates(self, context):
        return self._call(context, 'list_aggregates', '1.3')

    def get_aggregate(self, context, aggregate):
        """The aggregate with this id, UUID or name: {id, uuid, name,
        availability_zone, hosts, metadata, created_at, updated_at}."""
        return self._call(context, 'get_aggregate', '1.3',
                          aggregate=aggregate)

    def create_aggregate(self, context, name, availability_zone=None):
        return self._call(context, 'create_aggregate', '1.3', name=name,
                          availability_zone=availability_zone)

    def update_aggregate(self, context, aggregate, values):
        """``values``: {'name': ..., 'availability_zone': ... or None}."""
        return self._call(context, 'update_aggregate', '1.3',
                          aggregate=aggregate, values=values)

    def set_aggregate_metadata(self, context, aggregate, metadata):
        """Set the keys of ``metadata``; a None value unsets its key."""
        return self._call(context, 'set_aggregate_metadata', '1.3',
                          aggregate=aggregate, metadata=metadata)

    def delete_aggregate(self, context, aggregate):
        """{'warnings': [...]} (see add_aggregate_host)."""
        return self._call(context, 'delete_aggregate', '1.3',
                          aggregate=aggregate)

    def add_aggregate_host(self, context, aggregate, host):
        """The aggregate (see get_aggregate), with ``warnings``: what
        Placement refused while the providers of the host's enrolled
        nodes joined the Placement aggregate of the same UUID."""
        return self._call(context, 'add_aggregate_host', '1.3',
                          aggregate=aggregate, host=host)

    def remove_aggregate_host(self, context, aggregate, host):
        """The aggregate, with ``warnings`` (see add_aggregate_host)."""
        return self._call(context, 'remove_aggregate_host', '1.3',
                          aggregate=aggregate, host=host)
