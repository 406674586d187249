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
* get_operation: OperationNotFound; get_cluster: ClusterNotFound;
  get_hypervisor: HypervisorNotFound;
* delete_hypervisor: HypervisorNotFound, HypervisorInUse.

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
"""

from tenks import rpc

RPC_API_VERSION = '1.2'


class ConductorAPI:

    def __init__(self, bus, timeout=None):
        self.client = bus.get_client(rpc.CONDUCTOR_TOPIC, RPC_API_VERSION)
        if timeout is not None:
            self.client = self.client.prepare(timeout=timeout)

    def _call(self, method, version='1.0', **kwargs):
        return self.client.prepare(version=version).call({}, method,
                                                         **kwargs)

    # From hostagents

    def report_result(self, conductor, request_id, host, result=None,
                      error=None):
        """Hand the outcome of ``request_id`` to the conductor waiting."""
        cctxt = self.client.prepare(server=conductor, version='1.0')
        cctxt.cast({}, 'report_result', request_id=request_id, host=host,
                   result=result, error=error)

    def register_agent(self, host, facts):
        """Register or heartbeat hostagent ``host`` with its facts."""
        self.client.prepare(version='1.0').cast(
            {}, 'register_agent', host=host, facts=facts)

    # For operators and other services

    def deploy_cluster(self, spec, force=False):
        """Start deploying ``spec`` (a dict); return its operation id."""
        if force:
            return self._call('deploy_cluster', version='1.2', spec=spec,
                              force=True)
        return self._call('deploy_cluster', spec=spec)

    def plan_cluster(self, spec, force=False):
        """What deploying ``spec`` would change: {'cluster', 'changes':
        [{'node', 'hypervisor', 'resource', 'action', 'field', 'old',
        'new'}], 'destructive': bool}."""
        return self._call('plan_cluster', version='1.2', spec=spec,
                          force=force)

    def teardown_cluster(self, name):
        """Start tearing cluster ``name`` down; return its operation id."""
        return self._call('teardown_cluster', name=name)

    def get_operation(self, operation_id):
        """State ('running', 'succeeded', 'failed', 'interrupted'),
        progress per stage ({stage: [done, total]}) and error."""
        return self._call('get_operation', operation_id=operation_id)

    def list_operations(self, cluster=None):
        return self._call('list_operations', cluster=cluster)

    def get_cluster(self, name):
        """The cluster, its spec (password masked) and its nodes."""
        return self._call('get_cluster', name=name)

    def list_clusters(self):
        return self._call('list_clusters')

    def list_nodes(self, cluster=None):
        return self._call('list_nodes', cluster=cluster)

    def list_hypervisors(self):
        return self._call('list_hypervisors')

    def get_hypervisor(self, host):
        return self._call('get_hypervisor', host=host)

    def delete_hypervisor(self, host):
        """Forget hypervisor ``host``, which must be down and host no
        node nor any other resource."""
        return self._call('delete_hypervisor', version='1.1', host=host)

    def list_events(self, cluster=None, limit=100):
        return self._call('list_events', cluster=cluster, limit=limit)
