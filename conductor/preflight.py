"""Checks made with the hypervisors before a deploy creates anything.

The scheduler has chosen the new nodes' hosts on the facts of a first
``inspect``; this checks every hypervisor of the plan, and asks each
whether the interfaces the deploy would create there are free, whether
the domains and volumes of its new nodes are, and whether the devices
of the logical pools it would build may be taken.
"""

import uuid

from conductor import inspection
from hostagent import rpcapi as hostagent_rpcapi
from tenks import constants
from tenks import exceptions
from tenks import names
from tenks import reconcile
from tenks import states
from tenks.scheduler import host_state


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
        offered = host_state.network_drivers(facts[host])
        if spec['bridge_type'] not in offered:
            raise exceptions.NetworkDriverMismatch(
                host=host, driver=', '.join(offered),
                bridge_type=spec['bridge_type'])
    wanted = planned_interfaces(hosts, nodes)
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
    problems = interface_conflicts(spec, wanted, found, resources)
    if problems:
        raise exceptions.InterfaceConflict(
            conflicts=exceptions.first_of(problems, 10))



def planned_interfaces(hosts, nodes):
    """{host: {interface name: spec field it comes from}} of the
    interfaces a deploy creates: bridges and uplink veths of ``hosts``
    ({host: tenks.reconcile.host_setup}), taps of ``nodes`` (records)."""
    wanted = {}
    for host, setup in hosts.items():
        names_here = wanted.setdefault(host, {})
        for bridge in setup['bridges']:
            names_here[bridge['name']] = 'bridge_prefix'
            for veth in (bridge['uplink'] or {}).get('veth_names', ()):
                names_here[veth] = 'bridge_prefix'
    for node in nodes:
        field = 'specs[%d].node_name_prefix' % node['spec_index']
        for nic in node['nics']:
            wanted.setdefault(node['hypervisor'], {})[nic['tap']] = field
    return wanted


def interface_conflicts(spec, wanted, facts, recorded):
    """Problems with the interfaces ``wanted`` (planned_interfaces) a
    deploy of ``spec`` would create, each naming the spec field, the
    interface, the host and who holds it.

    ``facts``: {host: inspect result for those interfaces};
    ``recorded``: resources (dicts: cluster, hypervisor, kind, name) of
    every cluster of this state database. A name recorded for another
    cluster, or present on the host without this deployment's mark, is
    taken; a bridge's uplink is recorded under the bridge's name.
    """
    problems = []
    for resource in recorded:
        if resource['cluster'] == spec['cluster'] or resource['kind'] not in (
                'bridge', 'uplink', 'port'):
            continue
        field = wanted.get(resource['hypervisor'], {}).get(resource['name'])
        if field is not None:
            problems.append('%s: %s %s on %s is recorded for cluster %s' % (
                field, 'tap' if resource['kind'] == 'port' else 'bridge',
                resource['name'], resource['hypervisor'],
                resource['cluster']))
    for host, names_here in sorted(wanted.items()):
        for name, mark in facts[host]['foreign_interfaces']:
            problems.append('%s: interface %s exists on %s %s' % (
                names_here.get(name, '?'), name, host,
                'with owner mark %r' % mark if mark
                else 'without an owner mark'))
    return list(dict.fromkeys(problems))


# The spec field that names each kind of a node's parts.
NAMED_BY = {'volume': 'vol_name_prefix'}
# The parts of new nodes check_new_nodes reads.
NEW_NODE_PARTS = ('domain', 'volume')


def check_new_nodes(agents, plan, passwords, operation=None):
    """Raise NameConflict if a part of a node the plan creates (its
    domain, a volume) exists on its hypervisor without the deployment's
    mark: another state directory's cluster of the same
    names, or something Tenks did not make; ExistingVolumesGone if an
    existing volume of one is not there (see check_existing).
    ``passwords``: the BMC passwords of the spec
    (tenks.reconcile.bmc_passwords); ``operation``: the deploy's (None:
    a plan)."""
    by_host = {}
    for entry in plan['nodes']:
        if entry['action'] == constants.CREATE:
            by_host.setdefault(entry['hypervisor'], []).append(entry)
    problems = []
    drift = {}
    for host, entries in sorted(by_host.items()):
        found = agents.request(
            host, 'inspect_nodes', 'inspect-nodes/%s' % uuid.uuid4(),
            operation,
            nodes=[hostagent_rpcapi.node_request(e['new'], passwords)
                   for e in entries],
            owner=plan['owner'], parts=list(NEW_NODE_PARTS))['nodes']
        # An agent older than 1.7 (under an [upgrade_levels] cap) reads
        # every part.
        found = {node: [part for part in parts
                        if part[0] in NEW_NODE_PARTS]
                 for node, parts in found.items()}
        drift.update(found)
        for entry in entries:
            field = 'specs[%d].%%s' % entry['new']['record']['spec_index']
            problems += [
                '%s: %s %s on %s exists and is not this deployment\'s' % (
                    field % NAMED_BY.get(kind, 'node_name_prefix'), kind,
                    name, host)
                for kind, name, what in found[entry['uuid']]
                if what == states.PART_FOREIGN]
    if problems:
        raise exceptions.NameConflict(conflicts='; '.join(problems))
    check_existing(plan, drift)


def check_existing(plan, drift):
    """Raise ExistingVolumesGone when a node of the plan has an existing
    volume (somebody else's, attached as it is) that its hypervisor
    reports missing (``drift``: {uuid: [[kind, name, what]]}, as
    inspect_nodes reports): Tenks never makes one, so no deploy can
    bring it back."""
    gone = []
    for entry in plan['nodes']:
        pools = {vol['name']: vol['pool'] for vol in (entry['new'] or {}).get(
            'volumes', ()) if vol.get('existing')}
        gone += ['volume %s of storage pool %s (of node %s on %s)' % (
                     name, pools[name], entry['name'], entry['hypervisor'])
                 for kind, name, what in drift.get(entry['uuid'], ())
                 if kind == 'volume' and what == states.PART_MISSING
                 and name in pools]
    if gone:
        raise exceptions.ExistingVolumesGone(volumes='; '.join(gone))


def check_pools(agents, plan, operation=None):
    """Raise DeviceRefused (the hypervisor's, naming each device and
    what it holds) when a logical pool the plan makes would take a
    device that is not a whole, unused and blank block device, unless
    the spec lets it wipe that device. ``operation``: the deploy's or
    move's (None: a plan)."""
    for entry in plan['host_ensure']:
        args = entry['args']
        if entry['kind'] != 'pool' or args.get('pool_type') != 'logical':
            continue
        agents.request(
            entry['hypervisor'], 'check_pool_devices',
            'check-pool-devices/%s' % uuid.uuid4(), operation,
            name=args['name'], devices=args['devices'],
            owner=args['owner'],
            **({'wipe': args['wipe']} if 'wipe' in args else {}))
