"""Choose a hypervisor for each node a spec asks for, as Nova's filter
scheduler does: filters remove the hosts that cannot take a node, then
weighers rank the others.

Filters and weighers are plugins (tenks.scheduler.filters and .weights,
and an operator's own, registered under the ``tenks.scheduler.filters``
and ``tenks.scheduler.weighers`` entry points), chosen by ``[scheduler]``
options. A host choice is a pure function of the spec, what each
hypervisor reported (``inspect``), the conductor's view of each (enabled,
zone, aggregates) and the nodes already recorded, so that it is easy to
test and to grow without touching the flows.
"""

import functools
import heapq

from stevedore import named

from tenks import conf as tenks_conf
from tenks import exceptions
from tenks import node_records
from tenks.scheduler import host_state

FILTER_NAMESPACE = 'tenks.scheduler.filters'
WEIGHER_NAMESPACE = 'tenks.scheduler.weighers'
DEFAULT_ZONE = 'nova'


class Options:
    """What the scheduler runs: ``filters`` (BaseHostFilter objects, in
    the order they run; the error of a failed host choice counts the
    hosts each removed in this order), ``weighers`` (BaseHostWeigher
    objects, with their multipliers) and the zone of the hosts in none.
    """

    def __init__(self, filters, weighers,
                 default_availability_zone=DEFAULT_ZONE):
        self.filters = filters
        self.weighers = weighers
        self.default_availability_zone = default_availability_zone


def _load(namespace, names):
    """The classes registered in entry point group ``namespace`` under
    ``names``, in that order: the configuration's choices are the names
    installed."""
    def failed(manager, entry_point, error):
        raise exceptions.ConfigError(reason='%s %s (%s) cannot be loaded: '
                                     '%s' % (namespace, entry_point.name,
                                             entry_point.value, error))
    # Missing names are reported below, with the names registered.
    manager = named.NamedExtensionManager(
        namespace, names, name_order=True, on_load_failure_callback=failed,
        on_missing_entrypoints_callback=lambda missing: None)
    missing = [name for name in names if name not in manager.names()]
    if missing:
        raise exceptions.ConfigError(
            reason='no %s registered as %s (registered: %s)' % (
                namespace, ', '.join(missing),
                ', '.join(sorted(set(manager.entry_points_names())))))
    return [extension.plugin for extension in manager]


def load_options(enabled_filters=tenks_conf.SCHEDULER_FILTERS,
                 weight_multipliers=None,
                 default_availability_zone=DEFAULT_ZONE):
    """Options with the filters named ``enabled_filters`` and the
    weighers of ``weight_multipliers`` ({name: multiplier}; default: the
    built-in ones at 1.0), loaded from their entry points."""
    if weight_multipliers is None:
        weight_multipliers = dict.fromkeys(tenks_conf.SCHEDULER_WEIGHERS, 1.0)
    filters = [cls() for cls in _load(FILTER_NAMESPACE, enabled_filters)]
    weighers = [cls(multiplier) for cls, multiplier in zip(
        _load(WEIGHER_NAMESPACE, list(weight_multipliers)),
        weight_multipliers.values(), strict=True)]
    return Options(filters, weighers, default_availability_zone)


@functools.cache
def default_options():
    """The options of a default ``[scheduler]``."""
    return load_options()


def options_from_conf(conf):
    """The scheduler's options from ``[scheduler]``."""
    group = conf.scheduler
    return load_options(
        group.enabled_filters,
        {name: tenks_conf.weight_multiplier(conf, name)
         for name in group.enabled_weighers},
        group.default_availability_zone)


class Chooser:
    """Filters, then weighs: a heap of the hosts that pass the filters
    that do not change while nodes are given hosts, best weight first,
    so that choosing hosts for N nodes among H costs N log H."""

    def __init__(self, hosts, options):
        self.hosts = hosts
        self.static = [f for f in options.filters if not f.dynamic]
        self.dynamic = [f for f in options.filters if f.dynamic]
        self.weighers = [(w.multiplier, w.weigh, w.tie_break)
                         for w in options.weighers if w.multiplier]

    def weight(self, host, request):
        """The host's rank in the heap (lowest first)."""
        weight = tie = 0.0
        for multiplier, weigh, tie_break in self.weighers:
            weight += multiplier * weigh(host, request)
            tie += multiplier * tie_break(host, request)
        return (-weight, -tie, host.name)

    def candidates(self, request):
        heap = [(self.weight(h, request), h) for h in self.hosts
                if all(f.host_passes(h, request) for f in self.static)]
        heapq.heapify(heap)
        return heap

    def choose(self, heap, request):
        """The best host of ``heap`` for one node, taken, and its BMC's
        (address, port); None when none fits (a host that does not fit
        now never will for this entry: choosing only takes)."""
        while heap:
            _, host = heap[0]
            if not all(f.host_passes(host, request) for f in self.dynamic):
                heapq.heappop(heap)
                continue
            endpoint = host.take(request)
            heapq.heapreplace(heap, (self.weight(host, request), host))
            return host, endpoint
        return None


def schedule(spec, facts, recorded, views=None, options=None):
    """Give the nodes of ``spec`` not recorded yet a host; return their
    records.

    ``facts``: {host: inspect result}; ``recorded``: node records (dicts)
    of every cluster, which keep their names, MACs and ports; ``views``:
    {host: the conductor's view of it} (see HostState), or a function
    returning it, called only when a node needs a host; ``options``: see
    Options (default: default_options()).
    """
    mine = node_records.recorded_counts(spec, recorded)
    if all(entry['count'] <= mine[index]
           for index, entry in enumerate(spec['specs'])):
        return []
    options = options or default_options()
    if callable(views):
        views = views()
    hosts = host_state.host_states(spec, facts, recorded, views or {},
                                   default_zone=options.default_availability_zone)
    chooser = Chooser(hosts, options)
    new_nodes = node_records.NewNodes(spec, recorded)
    nodes = []
    for index, entry in enumerate(spec['specs']):
        request = host_state.Request(spec, index, entry, recorded)
        heap = None
        for _ in range(entry['count'] - mine[index]):
            if heap is None:
                heap = chooser.candidates(request)
            chosen = chooser.choose(heap, request)
            if chosen is None:
                _no_valid_host(request, hosts, options)
            host, endpoint = chosen
            nodes.append(new_nodes.record(index, host.facts, endpoint))
    return nodes


def hosts_for_moves(spec, facts, recorded, moving, allowed, views=None,
                options=None):
    """A new host for each of ``moving`` (node records of ``spec``'s
    cluster, in the order given), chosen by the filters and weighers
    among ``allowed`` (host names), never the node's own host; each
    node moved counts for the next. ``recorded``: node records of every
    cluster, the moving ones where they are now. Returns {uuid: (host,
    (BMC address, port))}; NoValidHost names a node that fits nowhere.

    A host whose hostagent reaches the libvirt daemon of the node's host
    is no choice: the node's domain is there already, another
    hostagent's (see shared_libvirt).
    """
    options = options or default_options()
    if callable(views):
        views = views()
    hosts = host_state.host_states(
        spec, {h: f for h, f in facts.items() if h in allowed}, recorded,
        views or {}, host_state.physnet_hosts(facts),
        options.default_availability_zone)
    chooser = Chooser(hosts, options)
    chosen = {}
    for node in moving:
        index = node['spec_index']
        request = host_state.Request(spec, index, spec['specs'][index],
                                     recorded)
        shared = {h.name: shared_libvirt(node['hypervisor'],
                                         facts[node['hypervisor']], h.facts)
                  for h in hosts if h.name != node['hypervisor']}
        shared = {name: why for name, why in shared.items() if why}
        others = [h for h in hosts if h.name != node['hypervisor']
                  and h.name not in shared]
        heap = [(w, h) for w, h in chooser.candidates(request)
                if h in others]
        heapq.heapify(heap)
        found = chooser.choose(heap, request)
        if found is None:
            if not others and not shared:
                raise exceptions.NoValidHost(
                    what='node %s' % node['name'],
                    reason='no other hypervisor shares an aggregate with '
                           '%s' % node['hypervisor'])
            request.what = 'node %s (%s)' % (node['name'], request.what)
            _no_valid_host(request, others, options,
                           {name: ('shared libvirt', why)
                            for name, why in shared.items()})
        host, endpoint = found
        chosen[node['uuid']] = (host.name, endpoint)
    return chosen


def shared_libvirt(source, source_facts, facts):
    """Why a node cannot move from host ``source`` to the host of
    ``facts`` when their hostagents reach one libvirt daemon (its domain
    would be the other hostagent's already), else None. Hostagents older
    than this check do not say which daemon they reach."""
    daemon = source_facts.get('libvirt_daemon')
    if daemon is None or facts.get('libvirt_daemon') != daemon:
        return None
    return ('it shares the libvirt %s with %s, the node\'s host: a node '
            'moves only to another libvirt' % (daemon, source))


def _refusal(host, request, options):
    """(index of the filter, the filter, what, why) of the first enabled
    filter that removes ``host``."""
    for index, host_filter in enumerate(options.filters):
        if not host_filter.host_passes(host, request):
            return (index, host_filter) + tuple(
                host_filter.reason(host, request))
    raise AssertionError('no filter removes %s' % host.name)


def _no_valid_host(request, hosts, options, removed=None):
    """Raise the error saying why no host of ``hosts`` takes
    ``request``, from the reasons of the filters that removed them;
    ``removed``: {host: (what, why)} of other hosts, left out before the
    filters ran. When a filter removed the only host, its own error if
    it has one."""
    refusals = {h.name: _refusal(h, request, options) for h in hosts}
    if len(hosts) == 1 and not removed:
        [host] = hosts
        error = refusals[host.name][1].error(host, request)
        if error is not None:
            raise error
    count = len(hosts) + len(removed or {})
    reasons = {}
    for name, (what, why) in sorted((removed or {}).items()):
        reasons.setdefault(what, []).append('%s: %s' % (name, why))
    # In the order of the filters, then of what they removed hosts for.
    for name, (_, _, what, why) in sorted(
            refusals.items(), key=lambda item: (
                item[1][0], item[1][2], item[0])):
        reasons.setdefault(what, []).append('%s: %s' % (name, why))
    raise exceptions.NoValidHost(what=request.what, reason='%d %s; %s (%s)' % (
        count, 'hypervisor' if count == 1 else 'hypervisors',
        ', '.join('%s removed %d' % (key, len(why))
                  for key, why in reasons.items()),
        '; '.join(exceptions.first_of(why, 3)
                  for why in reasons.values())))

