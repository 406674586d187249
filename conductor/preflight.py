"""Checks made with the hypervisors before a deploy creates anything.

The scheduler has placed the nodes on the facts of a first ``inspect``;
this asks each hypervisor of the plan whether the interfaces the deploy
would create there are free, and refuses the deploy otherwise.
"""

import uuid

from conductor import plans
from tenks import exceptions
from tenks import scheduler


def check_interfaces(agents, spec, facts, nodes, resources, owner):
    """Raise InterfaceConflict if an interface the deploy of ``spec``
    would create is taken: recorded for another cluster (``resources``,
    dicts of every cluster), or on its host without the mark ``owner``
    (None: the deployment owns nothing yet).

    ``facts``: {host: first inspect result}; ``nodes``: every node of
    the cluster, recorded or just scheduled.
    """
    plan = plans.deploy_plan(spec, nodes, facts)
    wanted = scheduler.planned_interfaces(spec, plan)
    found = {
        host: agents.request(
            host, 'inspect', 'inspect/%s' % uuid.uuid4(),
            physnet_mappings=spec['physnet_mappings'],
            ipmi_address=spec['ipmi_address'], ipmi_ports=[],
            interfaces=sorted(interfaces), owner=owner)
        for host, interfaces in sorted(wanted.items())}
    problems = scheduler.interface_conflicts(spec, plan, found, resources)
    if problems:
        raise exceptions.InterfaceConflict(conflicts='; '.join(problems))
