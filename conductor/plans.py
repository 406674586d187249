"""Turn a spec and its recorded nodes into the JSON plan a flow runs."""

import os

from flows import post_deploy
from flows import registration
from tenks import names

GIB = 1024 ** 3


def deploy_plan(spec, deployment, nodes, facts):
    """``deployment``: the cluster record's uuid, which owner marks name;
    ``facts``: {host: inspect result}, with each host's own physnet
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
        'owner': names.owner(cluster, deployment),
        'domain_type': spec['libvirt_domain_type'],
        'ipmi_username': spec['ipmi_username'],
        'hosts': hosts,
        'nodes': [dict(node, ironic=ironic_node(spec, node),
                       console_log_enabled=spec['node_types'][
                           node['node_type']]['console_log_enabled'])
                  for node in nodes],
        'flavors': [nova_flavor(spec, flavor)
                    for flavor in spec['nova_flavors']],
        'placement_wait': placement_wait(spec),
        'placement_timeout': spec['placement_timeout'],
    }


def ironic_node(spec, node):
    """What registration sets on the node's Ironic node, or None when
    its spec has no ironic_config (no password: it is read when used)."""
    config = spec['specs'][node['spec_index']].get('ironic_config')
    if config is None:
        return None
    node_type = spec['node_types'][node['node_type']]
    volumes = node_type['volumes']
    properties = {
        'cpus': node_type['vcpus'],
        'memory_mb': node_type['memory_mb'],
        # GiB, rounded down: a root disk never bigger than the volume.
        'local_gb': volumes[0]['capacity'] // GIB if volumes else 0,
        'cpu_arch': 'x86_64',
        'capabilities': 'boot_mode:%s' % spec['default_boot_mode'],
    }
    properties.update(config['properties'])
    fields = {
        'name': node['name'],
        'driver': node_type.get('ironic_driver',
                                spec['default_ironic_driver']),
        'properties': properties,
        'resource_class': config['resource_class'],
    }
    fields.update({k: v for k, v in config.items()
                   if k.endswith('_interface')
                   or k in ('conductor_group', 'shard')})
    return {'fields': fields, 'traits': config['traits'],
            'rc': config['resource_class']}


def nova_flavor(spec, flavor):
    node_type = spec['node_types'][flavor['node_type']]
    volumes = node_type['volumes']
    flavor = dict(flavor, name=flavor.get('name', flavor['resource_class']))
    return {
        'name': flavor['name'],
        'vcpus': node_type['vcpus'],
        'ram': node_type['memory_mb'],
        'disk': volumes[0]['capacity'] // GIB if volumes else 0,
        'extra_specs': post_deploy.flavor_extra_specs(flavor),
    }


def placement_wait(spec):
    """[(resource class, traits, units)] to wait for, or None."""
    if not spec['wait_for_placement']:
        return None
    wanted = {}
    for entry in spec['specs']:
        config = entry.get('ironic_config')
        if config and entry['count']:
            key = (registration.normalise_resource_class(
                config['resource_class']), tuple(sorted(config['traits'])))
            wanted[key] = wanted.get(key, 0) + entry['count']
    return [[rc, list(traits), count]
            for (rc, traits), count in sorted(wanted.items())]
