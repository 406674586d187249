"""Names of what a cluster creates, derived in one place."""

import hashlib

IFNAMSIZ = 15
# How every owner mark starts.
OWNER_PREFIX = 'tenks:'


def owner(cluster, deployment):
    """The ownership mark put on everything the cluster creates.

    ``deployment`` is the uuid of the cluster's record: a same-named
    cluster of another state database or conductor owns nothing here.
    """
    return '%s%s:%s' % (OWNER_PREFIX, cluster, deployment)


def agent_owner(owner, hostagent):
    """The mark a hostagent puts on what it makes for the deployment
    whose mark is ``owner``: ``tenks:<cluster>:<deployment>/<hostagent>``
    (nothing before the slash has one, nor has [hostagent] host; LVM
    tags allow it). Two hostagents that share a libvirt or a machine
    never take each other's things.
    """
    return '%s/%s' % (owner, hostagent)


def deployment_mark(mark):
    """The deployment's part of ``mark`` (the mark itself when it names
    no hostagent)."""
    return mark.partition('/')[0]


def owns(owner, mark):
    """Whether ``owner`` may take a thing marked ``mark`` (None: no mark)
    as its own: the same mark, or the mark of ``owner``'s deployment
    alone, as things made before marks named their hostagent carry."""
    return mark is not None and mark in (owner, deployment_mark(owner))


def ifname(*parts):
    """An interface name from ``parts``, at most 15 characters.

    A name that would be longer keeps its start and ends with a hash of
    the whole, so it stays unique and stable.
    """
    name = '-'.join(parts)
    if len(name) <= IFNAMSIZ:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:4]
    return '%s-%s' % (name[:IFNAMSIZ - 5], digest)


def physnets(spec):
    """The cluster's physical networks: those the spec declares, then
    those only its node types name (hostagents map them), in order."""
    found = list(spec['physical_networks'])
    for node_type in spec['node_types'].values():
        found += [p for p in node_type['physical_networks']
                  if p not in found]
    return found


def physnet_indices(spec, recorded=None):
    """{physnet: the index of its bridge} for the physnets of ``spec``.

    The spec's own (``physnet_indices``, which the conductor records)
    by default, else their order. ``recorded``: those of the cluster as
    deployed: a physnet keeps its index while it exists, and a new one
    takes the lowest index none of ``recorded`` has, so that no bridge
    is renamed and the bridge of a physnet the same deploy removes (at
    its end) is never taken over.
    """
    if recorded is None:
        recorded = spec.get('physnet_indices') or {}
    kept = {p: recorded[p] for p in physnets(spec) if p in recorded}
    taken = set(recorded.values())
    free = (i for i in range(len(taken) + len(physnets(spec)) + 1)
            if i not in taken)
    return {p: kept[p] if p in kept else next(free)
            for p in physnets(spec)}


def with_physnet_indices(spec, recorded_spec=None):
    """``spec`` with its bridges' ``physnet_indices`` settled against
    those of ``recorded_spec``, the spec the cluster's record holds (None
    for a new cluster)."""
    recorded = (physnet_indices(recorded_spec) if recorded_spec is not None
                else {})
    return dict(spec, physnet_indices=physnet_indices(spec, recorded))


def bridge(spec, physnet, host_prefix=''):
    indices = spec.get('physnet_indices') or physnet_indices(spec)
    return ifname('%s%s%d' % (host_prefix, spec['bridge_prefix'],
                              indices[physnet]))


def uplink_veths(bridge_name):
    """(bridge end, source end) of the veth pair linking to a mapping."""
    return ifname('p', bridge_name, 'br'), ifname('p', bridge_name, 'phy')


def tap(node_name, index):
    return ifname('p', node_name, str(index))


def pool(cluster, host_prefix=''):
    return 'tenks-%s%s' % (host_prefix, cluster)


def volume(node_name, vol_name_prefix, index):
    return '%s%s%d' % (node_name, vol_name_prefix, index)


def node(prefix, index):
    return '%s%d' % (prefix, index)


def console_log(host_facts, node_type, node_name):
    """The path of a node's console log on its hypervisor, or None when
    its node type logs nothing (or the hostagent, older than API 1.4,
    does not say where its logs go: it decides alone)."""
    directory = host_facts.get('console_log_dir')
    if not node_type['console_log_enabled'] or directory is None:
        return None
    return '%s/%s-console.log' % (directory.rstrip('/'), node_name)
