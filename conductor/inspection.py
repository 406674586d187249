"""Inspection: what each hypervisor has, asked before a deploy creates
anything."""

import uuid

from tenks import exceptions
from tenks import node_records


def redfish_endpoint(spec):
    """The inspect arguments of the spec's Redfish endpoint: none when it
    has no Redfish node (an agent before API 1.4 can answer)."""
    address, port = node_records.redfish_endpoint(spec)
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
    allowed = set(spec['allow_host_uplinks'])
    for host, host_facts in sorted(facts.items()):
        for physnet, source in sorted(host_facts['physnet_mappings'].items()):
            # Agents before host_uplinks say nothing of them.
            if source in host_facts.get('host_uplinks', ()) and (
                    source not in allowed):
                raise exceptions.UplinkRefused(
                    physnet=physnet, source=source, host=host,
                    why='the loopback interface' if source == 'lo' else
                    'what its default route leaves by')
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
