"""Checks made with the hypervisors before a deploy creates anything.

The scheduler has placed the new nodes on the facts of a first
``inspect``; this checks every hypervisor of the plan, and asks each
whether the interfaces the deploy would create there are free.
"""

import uuid

from conductor import inspection
from tenks import exceptions
from tenks import names
from tenks import reconcile
from tenks import scheduler


def check_hosts(agents, spec, deployment, facts, nodes, resources,
                operation):
    """Raise NetworkDriverMismatch if a host of the plan (new nodes or
    not) runs another network driver than the spec's bridge_type, and
    InterfaceConflict if an interface the deploy of ``spec`` would
    create is taken: recorded for another cluster (``resources``, dicts
    of every cluster), or on its host without this deployment's mark.

    ``facts``: {host: first inspect result}; ``nodes``: every node of
    the cluster, recorded or just scheduled; ``operation``: the deploy's.
    """
    hosts = {host: reconcile.host_setup(spec, facts[host])
             for host in sorted({node['hypervisor'] for node in nodes})}
    for host in hosts:
        offered = scheduler.network_drivers(facts[host])
        if spec['bridge_type'] not in offered:
            raise exceptions.NetworkDriverMismatch(
                host=host, driver=', '.join(offered),
                bridge_type=spec['bridge_type'])
    wanted = scheduler.planned_interfaces(hosts, nodes)
    found = {
        host: agents.request(
            host, 'inspect', 'inspect/%s' % uuid.uuid4(), operation,
            physnet_mappings=spec['physnet_mappings'],
            ipmi_address=spec['ipmi_address'], ipmi_ports=[],
            interfaces=sorted(interfaces),
            owner=names.owner(spec['cluster'], deployment),
            # Only that driver's marks: a Linux bridge cluster never
            # connects to Open vSwitch.
            bridge_type=spec['bridge_type'],
            **inspection.redfish_endpoint(spec))
        for host, interfaces in sorted(wanted.items())}
    problems = scheduler.interface_conflicts(spec, wanted, found, resources)
    if problems:
        raise exceptions.InterfaceConflict(conflicts='; '.join(problems))
