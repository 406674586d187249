"""A deploy's plan: the spec against the records, on the hypervisors'
facts, with the nodes it adds scheduled (see tenks.reconcile)."""

from tenks import constants
from tenks import exceptions
from tenks import names
from tenks import reconcile
from tenks import scheduler
from tenks import states
from tenks.scheduler import host_state


def plan_deploy(spec, cluster, facts, nodes, resources, force,
                views=None, options=None):
    """The plan of a deploy of ``spec``, and the nodes it schedules.

    ``cluster``: the cluster's record (its spec is the old one, unless
    it is new: state 'scheduled'); ``facts``: {host: inspect result};
    ``nodes``: node records (dicts) of every cluster; ``resources``: this
    cluster's recorded resources (dicts); ``views`` and ``options``:
    see tenks.scheduler.schedule. Returns (plan, new nodes).
    """
    name = spec['cluster']
    away = sorted({n['hypervisor'] for n in nodes
                   if n['cluster'] == name and n['hypervisor'] not in facts})
    if away:
        raise exceptions.ChangeRefused(name=name, reason=(
            'its nodes on %s cannot be checked: no hostagent up there '
            '(see "tenks hypervisor list")' % ', '.join(away)))
    mapped = host_state.physnet_hosts(facts)
    check_physnets(spec, mapped)
    old_spec = (None if cluster.state == states.CLUSTER_SCHEDULED
                else cluster.spec)
    mine = [n for n in nodes if n['cluster'] == name]
    others = [n for n in nodes if n['cluster'] != name]
    old_views = {}
    if old_spec is not None:
        old_views = {
            n['uuid']: reconcile.view(old_spec, cluster.uuid, n,
                                      facts[n['hypervisor']])
            for n in mine
            if n['state'] == states.NODE_DEPLOYED and n['hypervisor'] in facts}
    placed = reconcile.reassign(old_spec, spec, mine)
    gone = reconcile.surplus(spec, placed)
    leaving = {n['uuid'] for n in gone}
    taken_macs = {nic['mac'] for n in nodes for nic in n['nics']}
    # IPMI ports by address and the cluster's SNMP outlets by host, of
    # every node recorded and kept: indexed once, not read again for
    # each kept node (n² for n nodes).
    ipmi_ports = reconcile.InUse(
        (n['bmc_address'], n['bmc_port'], n['uuid']) for n in nodes
        if n['bmc_type'] == 'ipmi')
    outlets = reconcile.InUse(
        (n['hypervisor'], int(n['bmc_system_id']), n['uuid']) for n in nodes
        if n['bmc_type'] == 'snmp' and n['cluster'] == spec['cluster'])
    kept = []
    for node in placed:
        if node['uuid'] in leaving:
            continue
        host_facts = facts[node['hypervisor']]
        kept.append(reconcile.reshaped(
            spec, node, host_facts, taken_macs,
            ipmi_ports.others(host_facts['ipmi_address'], node['uuid']),
            outlets.others(node['hypervisor'], node['uuid'])))
    new_nodes = scheduler.schedule(spec, facts, others + kept + gone,
                                   views, options)
    check_redfish_endpoints(facts, kept + new_nodes,
                            names.owner(name, cluster.uuid))
    plan = reconcile.plan(spec, old_spec, cluster.uuid, kept, gone,
                          old_views, new_nodes, facts, resources)
    plan['force'] = force
    plan['cluster_state'] = cluster.state
    plan['notes'] = [
        'physical network %s is mapped on no hypervisor: its bridges are '
        'isolated, with no uplink' % physnet
        for physnet in names.physnets(spec) if physnet not in mapped]
    return plan, new_nodes


def check_physnets(spec, mapped):
    """Raise NoValidHost for a physnet that the node types of ``spec``'s
    nodes name, that the spec does not declare and that no hypervisor
    maps (``mapped``: tenks.scheduler.host_state.physnet_hosts): a typo, or a
    hostagent's physnet_mappings missing."""
    used = {entry['type'] for entry in spec['specs'] if entry['count']}
    for type_name in sorted(used):
        for physnet in spec['node_types'][type_name]['physical_networks']:
            if physnet not in spec['physical_networks'] and (
                    physnet not in mapped):
                raise exceptions.NoValidHost(
                    what='node type %s' % type_name,
                    reason='its physical network %s is neither declared '
                           '(physical_networks) nor mapped by a hypervisor '
                           '(mapped: %s)' % (physnet, ', '.join(
                               '%s on %s' % (p, ', '.join(hosts))
                               for p, hosts in sorted(mapped.items()))
                               or 'none'))


def check_redfish_endpoints(facts, nodes, owner):
    """Raise EndpointInUse when a host of Redfish ``nodes`` has their
    endpoint taken by another process or another deployment's
    emulator."""
    for host in sorted({n['hypervisor'] for n in nodes
                        if n['bmc_type'] == 'redfish'}):
        user = facts[host].get('redfish_port_user')
        if user is not None and user != owner:
            raise exceptions.EndpointInUse(
                address=facts[host]['redfish_address'],
                port=facts[host]['redfish_port'], host=host,
                user='the Redfish emulator of %s' % user if user
                else 'another process')


def deployed_in_ironic(plan):
    """UUIDs of the enrolled nodes the plan removes or resizes, which
    Ironic must not have deployed (unless forced)."""
    return sorted(
        entry['uuid'] for entry in plan['nodes']
        if entry['old'] is not None and entry['old'].get('ironic')
        and (entry['new'] is None or entry['agent']))


def _ensure_bridge(plan, host, bridge, wanted):
    """Add the bridge ``bridge`` of ``host`` and its uplink (``wanted``:
    host_resources) to the plan's host_ensure, once."""
    planned = {(e['hypervisor'], e['kind'], e['name'])
               for e in plan['host_ensure']}
    for kind, name, args in wanted:
        if name == bridge and kind in ('bridge', 'uplink') and (
                host, kind, name) not in planned:
            plan['host_ensure'].append({'hypervisor': host, 'kind': kind,
                                        'name': name, 'args': args,
                                        'old': None})


def add_drift(plan, drift, host_resources=None):
    """Mark for repair the nodes left as they are that their hypervisors
    report otherwise than recorded (``drift``: {uuid: [[kind, name,
    what]]} from the hostagents' inspect_nodes): a deploy ensures them
    again. A bridge they report missing is made again, with its uplink,
    from ``host_resources(host)`` (tenks.reconcile.host_resources)."""
    for entry in plan['nodes']:
        found = drift.get(entry['uuid'])
        if not found or entry['action'] != constants.KEEP:
            continue
        # A BMC made again may serve otherwise (HTTPS now): Ironic's
        # driver_info follows.
        entry.update(action=constants.UPDATE, agent=True,
                     enrol=entry['enrol'] or (
                         entry['new']['ironic'] is not None
                         and any(kind == 'bmc' for kind, _, _ in found)))
        for kind, name, what in found:
            if kind == 'bridge' and host_resources is not None:
                _ensure_bridge(plan, entry['hypervisor'], name,
                               host_resources(entry['hypervisor']))
            plan['changes'].append({
                'node': entry['name'], 'hypervisor': entry['hypervisor'],
                'resource': kind if kind in ('domain', 'bmc')
                else '%s %s' % (kind, name),
                'action': constants.REPAIR, 'field': None, 'old': what,
                'new': None})


def teardown_plan(cluster, nodes, resources, force=False, state=None):
    """What a teardown removes: each node with its recorded resources
    (dicts), then the rest. ``force``: remove nodes Ironic has deployed
    too (see Teardowns.submit); ``state``: the cluster's."""
    planned = {}
    for node in nodes:
        planned[node['uuid']] = {'uuid': node['uuid'], 'name': node['name'],
                                 'hypervisor': node['hypervisor'],
                                 'rows': []}
    others = []
    for row in resources:
        entry = planned.get(row['node'])
        if entry is None:
            others.append(row)
        else:
            entry['rows'].append(row)
    return {'cluster': cluster, 'nodes': list(planned.values()),
            'others': others, 'force': force, 'cluster_state': state}
