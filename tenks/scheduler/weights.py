"""Host weighers: among the hosts the filters leave, the heaviest takes
the node.

A weigher is a class registered under the ``tenks.scheduler.weighers``
entry points, enabled by name in ``[scheduler] enabled_weighers``, its
multiplier in ``[scheduler] <name>_weight_multiplier``. A host's weight
is the sum over the weighers of multiplier times ``weigh``; hosts of
equal weight go by the same sum of ``tie_break``, then by name. Weights
must change only when the host takes a node: the scheduler keeps the
hosts in a heap.
"""

from tenks import constants
from tenks import resources


class BaseHostWeigher:
    """A weigher of hosts (tenks.scheduler.host_state.HostState) for a
    node of a spec entry (tenks.scheduler.host_state.Request)."""

    #: The name ``[scheduler] enabled_weighers`` knows it by (its entry
    #: point's).
    name = None

    def __init__(self, multiplier=1.0):
        self.multiplier = multiplier

    def weigh(self, host, request):
        """The host's weight, best highest, before the multiplier; best
        kept within [0, 1] so that multipliers compare weighers."""
        raise NotImplementedError

    def tie_break(self, host, request):
        """What decides, the same way, between hosts of equal weight."""
        return 0.0


class ResourceWeigher(BaseHostWeigher):
    """The share of the capacity of ``resource_class`` the host has
    free: positive multipliers spread the nodes, evening out the hosts'
    use, negative ones pack them. Between hosts of equal shares, what is
    free over the largest capacity among the hosts: the bigger of two
    equally used hosts first."""

    resource_class = None

    def weigh(self, host, request):
        inventory = host.inventories.get(self.resource_class)
        if inventory is None:
            return 0.0
        return host.free(self.resource_class) / max(
            resources.capacity(inventory), 1)

    def tie_break(self, host, request):
        if self.resource_class not in host.inventories:
            return 0.0
        return (host.free(self.resource_class)
                / host.largest[self.resource_class])


class CPUWeigher(ResourceWeigher):
    name = 'cpu'
    resource_class = constants.VCPU


class RAMWeigher(ResourceWeigher):
    name = 'ram'
    resource_class = constants.MEMORY_MB


class DiskWeigher(ResourceWeigher):
    name = 'disk'
    resource_class = constants.DISK_GB
