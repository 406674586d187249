"""Turn a spec and its recorded nodes into the JSON plan a flow runs."""

import os

from tenks import names


def deploy_plan(spec, nodes, facts):
    """``facts``: {host: inspect result}, with each host's own physnet
    mappings, BMC address and name prefix applied."""
    cluster = spec['cluster']
    hosts = {}
    for host in sorted({node['hypervisor'] for node in nodes}):
        prefix = facts[host]['resource_prefix']
        mappings = facts[host]['physnet_mappings']
        bridges = []
        for physnet in spec['physical_networks']:
            bridge = names.bridge(spec, physnet, prefix)
            uplink = None
            if physnet in mappings:
                uplink = {'source': mappings[physnet],
                          'veth_names': list(names.uplink_veths(bridge))}
            bridges.append({'name': bridge, 'physnet': physnet,
                            'uplink': uplink})
        hosts[host] = {
            'pool': {'name': names.pool(cluster, prefix),
                     'path': os.path.join(facts[host]['pool_dir'],
                                          prefix + cluster)},
            'bridges': bridges,
        }
    return {
        'cluster': cluster,
        'owner': names.owner(cluster),
        'domain_type': spec['libvirt_domain_type'],
        'ipmi_username': spec['ipmi_username'],
        'hosts': hosts,
        'nodes': nodes,
    }
