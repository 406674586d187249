"""Turn a spec and its recorded nodes into the JSON plan a flow runs."""

import os

from tenks import names


def deploy_plan(spec, nodes, facts):
    cluster = spec['cluster']
    mappings = spec['physnet_mappings']
    hosts = {}
    for host in sorted({node['hypervisor'] for node in nodes}):
        bridges = []
        for physnet in spec['physical_networks']:
            bridge = names.bridge(spec, physnet)
            uplink = None
            if physnet in mappings:
                uplink = {'source': mappings[physnet],
                          'veth_names': list(names.uplink_veths(bridge))}
            bridges.append({'name': bridge, 'physnet': physnet,
                            'uplink': uplink})
        hosts[host] = {
            'pool': {'name': names.pool(cluster),
                     'path': os.path.join(facts[host]['pool_dir'], cluster)},
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
