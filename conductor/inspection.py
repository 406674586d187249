"""Inspection: what each hypervisor has, asked before a deploy creates
anything."""

import uuid

from tenks import exceptions
from tenks import scheduler


def redfish_endpoint(spec):
    """The inspect arguments of the spec's Redfish endpoint: none when it
    has no Redfish node (an agent before API 1.4 can answer)."""
    address, port = scheduler.redfish_endpoint(spec)
    if address is None:
        return {}
    return {'redfish_address': address, 'redfish_port': port}


def inspect(agents, hosts, spec, operation=None):
    """Ask each of ``hosts`` what it has, for ``operation`` (None: for
    none, a plan); fail before creating anything if an interface the
    spec maps is missing on all of them."""
    ports = list(range(spec['ipmi_port_range_start'],
                       spec['ipmi_port_range_end'] + 1))
    facts = {}
    for host in hosts:
        facts[host] = agents.request(
            host, 'inspect', 'inspect/%s' % uuid.uuid4(), operation,
            physnet_mappings=spec['physnet_mappings'],
            ipmi_address=spec['ipmi_address'], ipmi_ports=ports,
            interfaces=[], owner=None, **redfish_endpoint(spec))
    missing = {}
    for host, host_facts in facts.items():
        for physnet, source in host_facts['missing_interfaces']:
            missing.setdefault((physnet, source), []).append(host)
    for (physnet, source), hosts in sorted(missing.items()):
        if len(hosts) == len(facts):
            raise exceptions.InterfaceNotFound(
                'Interface %s mapped to physical network %s does not '
                'exist on %s' % (source, physnet, ', '.join(hosts)))
    return facts
