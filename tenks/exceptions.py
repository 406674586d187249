"""Errors Tenks raises on purpose.

Every class here may travel over the bus: the hostagent reports it back
to the conductor by class name and message, and the conductor raises the
same type again (see :func:`from_report`). Messages say what failed and
where, in words an operator can act on.
"""


def first_of(items, shown, sep='; '):
    """The first ``shown`` of ``items`` joined by ``sep``, and how many
    more there are: a message stays readable at a thousand nodes."""
    items = list(items)
    more = len(items) - shown
    return sep.join(items[:shown]) + (' and %d more' % more
                                      if more > 0 else '')


class TenksError(Exception):
    """Base class; ``msg_fmt`` is filled from the keyword arguments.

    An error rebuilt from its message and keyword arguments is the same
    error: that is how oslo.messaging brings it over the bus.
    """

    msg_fmt = 'An unknown error occurred'

    def __init__(self, message=None, **kwargs):
        self.kwargs = kwargs
        if message is None:
            message = self.msg_fmt % kwargs
        super().__init__(message)


class SpecError(TenksError):
    """A cluster spec is malformed; nothing was created.

    ``source`` names the file (or request), ``problems`` lists each
    problem as '<field path>: <what is wrong>'.
    """

    def __init__(self, message=None, *, source, problems):
        self.source = source
        self.problems = list(problems)
        if message is None:
            message = '%s: invalid cluster spec:\n  %s' % (
                source, '\n  '.join(self.problems))
        super().__init__(message, source=source, problems=self.problems)


class ConfigError(TenksError):
    msg_fmt = 'Invalid configuration: %(reason)s'


class JobboardError(TenksError):
    """The jobboard's server cannot be used (the URL's password
    masked)."""

    msg_fmt = 'Jobboard %(url)s %(reason)s'


class StateDatabaseError(TenksError):
    """The state database cannot be used as it is: unreachable, or its
    schema is not this Tenks' (the URL's password masked)."""

    msg_fmt = 'State database %(url)s %(reason)s'


class ClusterNotFound(TenksError):
    msg_fmt = 'No cluster named %(name)s is deployed'


class ClusterBusy(TenksError):
    msg_fmt = ('Cluster %(name)s is locked by another operation; '
               'try again when it has finished')

    def __init__(self, message=None, operation=None, **kwargs):
        """``operation``: the record of the operation that holds the
        cluster, when known: the message names it and its conductor."""
        if message is None and operation is not None:
            message = ('Cluster %s is busy: %s %s runs on conductor %s; '
                       'try again when it has finished' % (
                           kwargs['name'], operation.kind, operation.id,
                           operation.conductor))
        super().__init__(message, **kwargs)


class OperationNotFound(TenksError):
    msg_fmt = 'No operation %(id)s'


class OperationHasNoFlow(TenksError):
    msg_fmt = 'Operation %(id)s has no flow to draw: %(reason)s'


class GraphError(TenksError):
    msg_fmt = 'Cannot write the graph as %(format)s: %(reason)s'


class NodeNotFound(TenksError):
    msg_fmt = 'No node named %(node)s or with that UUID%(where)s'


class ListingInvalid(TenksError):
    msg_fmt = 'Cannot list %(what)s so: %(reason)s'


class NodeAmbiguous(TenksError):
    msg_fmt = ('%(count)d nodes are named %(node)s (%(matches)s): name '
               'the cluster with --cluster, or use the node\'s UUID')


class BmcFaultInvalid(TenksError):
    msg_fmt = 'Cannot fault the BMC of node %(node)s: %(reason)s'


class BmcFaultsLeft(TenksError):
    msg_fmt = 'BMC faults not cleared (still recorded): %(failed)s'


class HypervisorNotFound(TenksError):
    msg_fmt = 'No hypervisor %(host)s has registered'


class HypervisorInUse(TenksError):
    msg_fmt = 'Hypervisor %(host)s cannot be deleted: %(reason)s'


class HypervisorInvalid(TenksError):
    msg_fmt = 'Hypervisor %(host)s cannot be changed so: %(reason)s'


class AggregateNotFound(TenksError):
    msg_fmt = 'No aggregate with name or id %(aggregate)s'


class AggregateInvalid(TenksError):
    """A request about an aggregate has a bad value."""

    msg_fmt = 'Aggregate %(aggregate)s: %(reason)s'


class AggregateConflict(TenksError):
    """A change to an aggregate breaks one of its rules."""

    msg_fmt = 'Aggregate %(aggregate)s: %(reason)s'


class PolicyNotAuthorized(TenksError):
    msg_fmt = ('Policy does not allow %(action)s to be performed by a '
               'caller with roles %(roles)s')


class ConductorLost(TenksError):
    msg_fmt = ('Stopped following operation %(id)s: no answer from the '
               'conductor for %(waited)d s (--reconnect-timeout; last: '
               '%(reason)s). It may still run: "tenks operation show %(id)s" '
               'shows how it is doing')


class NothingToResume(TenksError):
    msg_fmt = ('Operation %(id)s cannot resume: no flow was saved for it '
               '(its conductor stopped before the flow began), so it '
               'created nothing; run it again')


class VersionCapped(TenksError):
    """A call needs a newer version of an RPC API than [upgrade_levels]
    lets its client send; raised before anything is sent."""

    msg_fmt = ('%(call)s needs version %(version)s of the %(service)s RPC '
               'API, above its cap %(cap)s ([upgrade_levels] %(service)s, '
               'set while older %(service)ss run): it can run once every '
               '%(service)s is upgraded and the cap is raised or removed')


class ConductorBusy(TenksError):
    msg_fmt = 'Conductor %(host)s takes no new operation: %(reason)s'


class SpecChanged(TenksError):
    msg_fmt = ('A deploy of cluster %(name)s was interrupted with another '
               'spec (%(fields)s differ): run it again with that spec to '
               'finish it, or tear the cluster down')


class ChangeRefused(TenksError):
    """A spec asks for a change that cannot be made in place."""

    msg_fmt = 'Cluster %(name)s cannot change as asked: %(reason)s'


class ExistingVolumesGone(TenksError):
    msg_fmt = ('Existing volumes are gone: %(volumes)s. Tenks attaches an '
               'existing volume as it is and never makes one: put it back, '
               'or take it out of the spec')


class NodesDeployed(TenksError):
    msg_fmt = ('Cluster %(name)s: Ironic has deployed %(nodes)s; a deploy '
               'never removes or resizes such nodes without --force')


class NodesInUse(TenksError):
    msg_fmt = ('Cluster %(name)s: %(in_use)s; a teardown removes nodes '
               'Ironic has deployed only with --force')


class NoValidHost(TenksError):
    msg_fmt = 'No valid host for %(what)s: %(reason)s'


class MachineUnsupported(NoValidHost):
    msg_fmt = 'Hypervisor %(host)s cannot run %(what)s: %(reason)s'


class PortRangeExhausted(NoValidHost):
    msg_fmt = ('IPMI port range %(start)d-%(end)d on %(host)s is exhausted: '
               '%(needed)d port(s) needed, %(free)d free')


class OutletsExhausted(NoValidHost):
    msg_fmt = ('The cluster\'s VirtualPDU on %(host)s has no free outlet: '
               'it has %(count)d, one per SNMP node')


class PoolSpaceExhausted(NoValidHost):
    msg_fmt = ('Hypervisor %(host)s has too little space for the new '
               'volumes: they need %(needed)s, its pool directory '
               '%(pool_dir)s has %(free)s free')


class BmcMemoryExhausted(NoValidHost):
    msg_fmt = ('Hypervisor %(host)s has too little memory for the new '
               'IPMI BMCs: %(count)d of them need %(needed)s at %(per_bmc)s '
               'each, it has %(free)s free')


class BridgeFull(NoValidHost):
    msg_fmt = ('Hypervisor %(host)s cannot take more nodes on the Linux '
               'bridge of %(physnets)s: a Linux bridge holds %(ports)d '
               'ports (the kernel\'s limit), so %(nodes)d nodes and an '
               'uplink; use bridge_type openvswitch, or more hypervisors')


class NetworkDriverMismatch(NoValidHost):
    msg_fmt = ('Hypervisor %(host)s offers the network driver(s) '
               '%(driver)s, but the spec asks for bridge_type '
               '%(bridge_type)s')


class InterfaceConflict(TenksError):
    """Interfaces a deploy would create exist and are not its own."""

    msg_fmt = 'Interface names of this deploy are taken: %(conflicts)s'


class UplinkRefused(TenksError):
    msg_fmt = ('physnet_mappings.%(physnet)s: %(source)s is %(why)s on '
               'hypervisor %(host)s: a bridge would take over the host\'s '
               'own traffic; list it in allow_host_uplinks to map it all '
               'the same')


class NameConflict(TenksError):
    """Domains or volumes a deploy would create exist and are not
    its own."""

    msg_fmt = 'Names of this deploy are taken: %(conflicts)s'


class EndpointInUse(TenksError):
    msg_fmt = ('redfish_port: the Redfish endpoint %(address)s:%(port)d on '
               '%(host)s is in use by %(user)s; choose another redfish_port '
               '(or [hostagent] redfish_port on that host)')


class CloudUnavailable(TenksError):
    msg_fmt = 'Cannot reach %(service)s at %(endpoint)s: %(reason)s'


class IronicDriverMissing(TenksError):
    """Nodes would be enrolled with a hardware type Ironic does not
    enable: refused before anything is made."""

    msg_fmt = ('Ironic at %(endpoint)s does not enable the hardware '
               'type(s) this spec enrols nodes with: %(missing)s (it '
               'enables: %(enabled)s). Add them to Ironic\'s [DEFAULT] '
               'enabled_hardware_types, or choose another ironic_driver')


class CloudError(TenksError):
    msg_fmt = '%(service)s refused to %(action)s: %(reason)s'


class CloudUnreachable(CloudError):
    """The request got no answer: the service could not be reached, or
    closed the connection under it."""

    msg_fmt = 'Could not reach %(service)s to %(action)s: %(reason)s'


class PlacementTimeout(TenksError):
    msg_fmt = ('Placement did not report the nodes within %(timeout)d s: '
               '%(short)s')


class OperationFailed(TenksError):
    msg_fmt = '%(operation)s of cluster %(cluster)s failed: %(reason)s'


class AgentTimeout(TenksError):
    """``unsent``: why the last copy of the request could not be sent
    (the end of the message), or ''."""

    msg_fmt = ('Hostagent on %(host)s did not answer %(method)s within '
               '%(timeout)s s%(unsent)s')

    def __init__(self, message=None, **kwargs):
        kwargs.setdefault('unsent', '')
        super().__init__(message, **kwargs)


class NodesNotDeployed(TenksError):
    msg_fmt = 'Could not make or change node(s) %(nodes)s'


class NodesNotRemoved(TenksError):
    msg_fmt = 'Could not remove node(s) %(nodes)s'


# Errors raised on a hypervisor by the hostagent and its drivers.

class HostAgentError(TenksError):
    """Raised on a hypervisor; ``host`` names it once reported back."""


class BmcAddressInvalid(HostAgentError):
    msg_fmt = ('%(field)s: %(address)s cannot be where the BMCs of '
               'hypervisor %(host)s listen: it is %(why)s')


class HypervisorUnavailable(HostAgentError):
    msg_fmt = 'Cannot reach libvirt at %(uri)s: %(reason)s'


class ResourceConflict(HostAgentError):
    msg_fmt = ('%(kind)s %(name)s already exists and is not owned by '
               '%(owner)s: %(reason)s')


class DeviceRefused(HostAgentError):
    msg_fmt = ('Storage pool %(pool)s cannot take its devices: '
               '%(problems)s. A logical pool takes whole block devices '
               'that nothing uses and that hold nothing; one that holds '
               'data only when the spec says so, as {path: <device>, '
               'wipe: true} in libvirt_pool_devices')


class InterfaceNotFound(HostAgentError):
    msg_fmt = ('Interface %(name)s does not exist (it is mapped to physical '
               'network %(physnet)s)')


class PortInUse(HostAgentError):
    msg_fmt = 'Port %(port)d on %(address)s is in use by another process'


class DriverError(HostAgentError):
    msg_fmt = '%(driver)s failed to %(action)s: %(reason)s'


class NodeRunning(HostAgentError):
    msg_fmt = ('Node %(node)s is running and would change (%(changes)s): '
               'power it off first, or force the change, which powers it '
               'off and on again')


class InvalidNodeRequest(HostAgentError):
    msg_fmt = 'Invalid request for node %(node)s: %(problems)s'


def to_report(exc):
    """Describe ``exc`` for the bus: its type name and message."""
    name = type(exc).__name__
    if not isinstance(exc, TenksError):
        return {'type': 'HostAgentError',
                'message': '%s: %s' % (name, exc)}
    return {'type': name, 'message': str(exc)}


def from_report(report, host):
    """Rebuild the exception a hostagent on ``host`` reported."""
    cls = globals().get(report.get('type'))
    if not (isinstance(cls, type) and issubclass(cls, TenksError)):
        cls = HostAgentError
    return cls('%s (on %s)' % (report.get('message'), host))
