"""The audit: the record against what the hypervisors and the cloud hold.

Each hypervisor's hostagent reports everything there that carries a
Tenks owner mark, whoever's, and the processes that serve BMCs
(``audit``), and how the recorded nodes there look (``inspect_nodes``);
the cloud answers for the recorded Ironic nodes, Nova flavors and
Placement aggregate memberships. Each difference is an entry
{'hypervisor', 'kind', 'name', 'status', 'cluster', 'mark', 'detail'}:

- of a deployment of this conductor: ``missing``, ``differs``,
  ``stopped``, ``smaller`` or ``foreign`` (a recorded thing that is not
  there, otherwise than recorded, or there but somebody else's; one
  recorded 'creating', never confirmed, is not missing), and
  ``unrecorded`` (carrying its mark, not in its record);
- ``leftover``: what carries the mark of a deployment proven dead (see
  DEAD), and processes serving BMCs of a state directory that no longer
  has them;
- ``unchecked``: what could not be read (a hostagent down, a service
  that did not answer);
- ``other``, which is not drift: what belongs to a deployment that
  another state directory records, or that nothing proves dead.

A thing is judged against the records of the hypervisor its mark names
(``.../<hostagent>``): hostagents that share a machine or a libvirt
daemon each see the others' things.
"""

import uuid
from concurrent import futures

from oslo_log import log as logging

from hostagent import rpcapi as hostagent_rpcapi
from tenks import constants
from tenks import names
from tenks import reconcile
from tenks import states
from tenks.cloud import ironic
from tenks.cloud import nova
from tenks.cloud import placement_aggregates

LOG = logging.getLogger(__name__)

OTHER = 'other'
LEFTOVER = 'leftover'
UNCHECKED = 'unchecked'
UNRECORDED = 'unrecorded'
# The hostagents' verdicts on a deployment (hostagent.deployments) that
# prove it dead when this conductor has no record of it either: every
# state directory noted for it is gone or no longer records it, or the
# only ones left are the hostagent's own, whose conductor is this one.
DEAD = (states.DEPLOYMENT_DEAD, states.DEPLOYMENT_HERE)
DAEMONS = ('ipmi host', 'redfish emulator', 'virtualpdu')
# The hostagent requests and cloud questions an audit has out at once.
MAX_REQUESTS = 16


def entry(hypervisor, kind, name, status, cluster=None, mark=None,
          detail=None):
    return {'hypervisor': hypervisor, 'kind': kind, 'name': name,
            'status': status, 'cluster': cluster, 'mark': mark,
            'detail': detail}


def unconfirmed(row, status):
    """Whether a thing its record (a resource dict) has as asked for, the
    request unanswered or answered with an error ('creating'), is found
    ``status``: missing is no drift then (it was never made)."""
    return (status == states.PART_MISSING
            and row['state'] == states.RESOURCE_CREATING)


def cluster_of(mark):
    """The cluster a Tenks owner mark names, or None."""
    parts = (mark or '').split(':')
    return parts[1] if len(parts) >= 3 else None


def audit(conductor, cluster=None, clean=False):
    """Audit every hypervisor and service (only what concerns
    ``cluster``, its records and the marks naming it, if given):
    {'drift': [entries], 'other': [entries], 'removed': [entries]}.
    ``clean``: remove the leftovers found (and the hostagents' notes of
    deployments that have ended), then audit again; 'removed' says what
    went."""
    auditor = Audit(conductor, cluster)
    report = auditor.run()
    removed = []
    if clean:
        auditor.clean(report)
        before = report['drift']
        report = Audit(conductor, cluster).run()
        after = {_key(e) for e in report['drift']}
        removed = [dict(e, status='removed') for e in before
                   if e['status'] == LEFTOVER and _key(e) not in after]
    report['removed'] = removed
    return report


def _key(found):
    return found['hypervisor'], found['kind'], found['name']


class Audit:
    """One audit: the records, read once, against the hypervisors."""

    def __init__(self, conductor, cluster=None):
        self.conductor = conductor
        self.db = conductor.db
        self.agents = conductor.agents
        self.only = cluster
        self.clusters = {names.owner(c.name, c.uuid): c
                         for c in self.db.list_clusters()}
        self.nodes = [n.as_dict() for n in self.db.list_nodes()
                      if self._wanted(n.cluster)]
        # (host, cluster) -> {(kind, name): resource row}
        self.records = {}
        for row in self.db.list_resources():
            if self._wanted(row.cluster):
                self.records.setdefault((row.hypervisor, row.cluster), {})[
                    (row.kind, row.name)] = row.as_dict()
        # (hypervisor, kind, name, status) -> entry
        self.entries = {}
        self.cloud_entries = {}
        # host -> its hostagent's audit
        self.surveys = {}
        # host -> its registered facts
        self.facts = {}

    def _wanted(self, cluster):
        return self.only is None or cluster == self.only

    def _add(self, hypervisor, kind, name, status, cluster=None, mark=None,
             detail=None):
        # The cloud's questions run beside the hostagents' requests: its
        # entries are kept apart.
        entries = (self.cloud_entries if hypervisor == constants.CLOUD_HOST
                   else self.entries)
        entries.setdefault((hypervisor, kind, name, status), entry(
            hypervisor, kind, name, status, cluster, mark, detail))

    def _request(self, host, method, **kwargs):
        return self.agents.request(host, method, '%s/%s' % (
            method.replace('_', '-'), uuid.uuid4()), **kwargs)

    def _facts(self, host):
        """What ``host``'s hostagent registered with."""
        facts = self.facts.get(host)
        if facts is None:
            row = self.db.get_hypervisor(host)
            facts = self.facts[host] = (row and row.facts) or {}
        return facts

    def _owner(self, cluster):
        return names.owner(cluster.name, cluster.uuid)

    def run(self):
        """{'drift': [entries], 'other': [entries]}, each sorted."""
        recorded = ({host for host, _ in self.records}
                    | {n['hypervisor'] for n in self.nodes}) - {
                        constants.CLOUD_HOST}
        try:
            hosts = sorted(self.conductor.registry.hypervisors())
        except Exception as e:
            LOG.warning('No hypervisor to audit: %s', e)
            hosts = []
        for host in sorted(recorded - set(hosts)):
            self._add(host, 'hypervisor', host, UNCHECKED,
                      detail='its hostagent is not up')
        # Every hostagent request, and the cloud's questions, at once:
        # each mostly waits on a hypervisor or a service. The hostagents'
        # answers are judged afterwards, one host after another.
        with futures.ThreadPoolExecutor(max_workers=MAX_REQUESTS) as pool:
            cloud = pool.submit(self._cloud)
            surveys = {host: pool.submit(self._ask, host, 'audit')
                       for host in hosts}
            inspected = {host: self._inspect(pool, host) for host in hosts
                         if self._facts(host)}
            for host in hosts:
                if host not in inspected:
                    # Its facts, which the requests need, are not recorded
                    # yet: its hostagent registers as it starts, before it
                    # answers.
                    surveys[host].result()
                    self.facts.pop(host)
                    inspected[host] = self._inspect(pool, host)
            cloud.result()
        for host, survey in surveys.items():
            if isinstance(survey.result(), Exception):
                self._add(host, 'hypervisor', host, UNCHECKED,
                          detail='its audit failed: %s' % survey.result())
            else:
                self.surveys[host] = survey.result()
        own = {survey['state_dir'] for survey in self.surveys.values()}
        for host, survey in self.surveys.items():
            for cluster, answer in inspected[host]:
                self._nodes(host, cluster, answer.result())
            self._host(host, survey, own)
        found = sorted([*self.entries.values(), *self.cloud_entries.values()],
                       key=lambda e: (e['hypervisor'], e['cluster'] or '',
                                      e['kind'], e['name'], e['status']))
        return {'drift': [e for e in found if e['status'] != OTHER],
                'other': [e for e in found if e['status'] == OTHER]}

    def _ask(self, host, method, **kwargs):
        """The answer of ``host``'s hostagent to ``method``, or the error
        it raised."""
        try:
            return self._request(host, method, **kwargs)
        except Exception as e:
            return e

    # A hypervisor

    def _host(self, host, survey, own):
        things = [t for t in survey['things']
                  if self._wanted(cluster_of(t['mark']))]
        for thing in things:
            self._thing(host, thing, survey['deployments'])
        self._host_resources(host, things)
        if self.only is None:
            self._daemons(host, survey['daemons'], own)

    def _inspect(self, pool, host):
        """Ask ``host``'s inspect_nodes, in ``pool``, about the recorded
        nodes there: [(cluster, future of the answer)], one per
        cluster."""
        asked = []
        for owner, cluster in sorted(self.clusters.items()):
            requests = []
            for node in self.nodes:
                if (node['cluster'], node['hypervisor']) != (cluster.name,
                                                             host):
                    continue
                try:
                    requests.append(hostagent_rpcapi.node_request(
                        reconcile.view(cluster.spec, cluster.uuid, node,
                                       self._facts(host)),
                        reconcile.bmc_passwords(cluster.spec)))
                except (KeyError, IndexError, TypeError) as e:
                    self._add(host, 'node', node['name'], UNCHECKED,
                              cluster.name, owner, 'its record does not '
                              'fit its cluster\'s spec (%s: %s)' % (
                                  type(e).__name__, e))
            if requests:
                asked.append((cluster, pool.submit(
                    self._ask, host, 'inspect_nodes', nodes=requests,
                    owner=owner)))
        return asked

    def _nodes(self, host, cluster, found):
        """The recorded parts of ``cluster``'s nodes on ``host`` that its
        hostagent's inspect_nodes ``found`` otherwise than recorded."""
        owner = self._owner(cluster)
        if isinstance(found, Exception):
            self._add(host, 'cluster', cluster.name, UNCHECKED,
                      cluster.name, owner,
                      'inspecting its nodes failed: %s' % found)
            return
        records = self.records.get((host, cluster.name), {})
        for drift in found['nodes'].values():
            for kind, name, what in drift:
                row = records.get((kind, name))
                if row is not None and not unconfirmed(row, what):
                    self._add(host, kind, name, what, cluster.name, owner)

    def _recorded(self, host, thing, cluster):
        """Whether ``thing`` (of a hostagent's audit) is in the records
        of ``cluster`` on ``host``."""
        records = self.records.get((host, cluster.name), {})
        kind, name = thing['kind'], thing['name']
        if kind in ('domain', 'volume', 'pool', 'port', 'bridge'):
            return (kind, name) in records
        if kind == 'nvram':
            return ('domain', name) in records
        uplinks = [row['remove_args'] for (k, _), row in records.items()
                   if k == 'uplink']
        if kind == 'veth':
            return any(name in args['veth_names'] for args in uplinks)
        if kind == 'ovs port':
            return ('port', name) in records or any(
                name in args['veth_names'] or name == args['source']
                for args in uplinks)
        types = {n['name']: n['bmc_type'] for n in self.nodes
                 if n['cluster'] == cluster.name and n['hypervisor'] == host}
        if kind == 'bmc':
            return ('bmc', name) in records and types.get(name) == 'ipmi'
        # An emulator (a PDU): each of its systems (outlets) a recorded
        # Redfish (SNMP) node's.
        wanted = 'snmp' if kind == 'pdu' else 'redfish'
        return bool(thing['systems']) and all(
            ('bmc', domain) in records and types.get(domain) == wanted
            for domain in thing['systems'])

    def _thing(self, host, thing, verdicts):
        """Judge something that carries a Tenks mark on ``host``'s
        machine, against the records of the hypervisor its mark
        names."""
        mark = thing['mark']
        owner, _, maker = mark.partition('/')
        at = maker or host
        where = (at, thing['kind'], thing['name'])
        detail = ('in storage pool %s; ' % thing['pool']
                  if thing['kind'] == 'volume' else '')
        cluster = self.clusters.get(owner)
        if cluster is not None:
            if not self._recorded(at, thing, cluster):
                self._add(*where, UNRECORDED, cluster.name, mark,
                          detail + 'it carries the mark of cluster %s, '
                          'whose record does not have it' % cluster.name)
            return
        verdict, reason = verdicts.get(owner, (states.DEPLOYMENT_UNKNOWN,
                                               'no verdict'))
        dead = verdict in DEAD
        if verdict == states.DEPLOYMENT_HERE:
            reason += ', and this conductor has no record of it'
        self._add(*where, LEFTOVER if dead else OTHER, cluster_of(mark),
                  mark, detail + 'deployment %s: %s' % (
                      'dead' if dead else 'not proven dead', reason))

    def _host_resources(self, host, things):
        """The recorded pools, bridges and uplinks of ``host`` against
        the things that carry marks there."""
        found = {(t['kind'], t['name']): t for t in things
                 if t['kind'] in ('pool', 'bridge')}
        for (where, cluster), records in sorted(self.records.items()):
            if where != host:
                continue
            for (kind, name), row in sorted(records.items()):
                owner = row['remove_args'].get('owner')
                if kind == 'uplink':
                    self._uplink(host, cluster, owner, row, found)
                elif kind in ('pool', 'bridge'):
                    self._host_resource(host, cluster, owner, row,
                                        found.get((kind, name)))

    def _host_resource(self, host, cluster, owner, row, thing):
        kind, name = row['kind'], row['name']
        where = (host, kind, name)
        if thing is None:
            if not unconfirmed(row, states.PART_MISSING):
                self._add(*where, states.PART_MISSING, cluster, owner)
        elif names.deployment_mark(thing['mark']) != owner:
            self._add(*where, states.PART_FOREIGN, cluster, owner,
                      'it carries the mark %s' % thing['mark'])
        elif kind == 'pool' and not thing['active']:
            self._add(*where, states.PART_STOPPED, cluster, owner,
                      'its pool is not active' if thing['defined'] else
                      'its directory is there, not its libvirt pool')
        elif kind == 'bridge':
            extra = sorted(set(thing['ports'])
                           - self._bridge_ports(host, cluster, name))
            if extra:
                self._add(*where, states.PART_DIFFERS, cluster, owner,
                          'ports its cluster has no record of: %s'
                          % ', '.join(extra))

    def _uplink(self, host, cluster, owner, row, found):
        args = row['remove_args']
        bridge = found.get(('bridge', args['bridge']))
        ports = set(bridge['ports']) if bridge else set()
        if not ports & {args['veth_names'][0], args['source']} and not (
                unconfirmed(row, states.PART_MISSING)):
            self._add(host, 'uplink', args['bridge'], states.PART_MISSING,
                      cluster, owner, 'bridge %s is not connected to %s' % (
                          args['bridge'], args['source']))

    def _bridge_ports(self, host, cluster, bridge):
        """The ports bridge ``bridge`` of ``cluster`` should have: its own
        (Open vSwitch's), its uplink's, its nodes' taps."""
        wanted = {bridge}
        for (kind, _), row in self.records.get((host, cluster), {}).items():
            args = row['remove_args']
            if kind == 'uplink' and args['bridge'] == bridge:
                wanted |= {args['veth_names'][0], args['source']}
        return wanted | {nic['tap'] for n in self.nodes
                         if (n['hypervisor'], n['cluster']) == (host, cluster)
                         for nic in n['nics'] if nic['bridge'] == bridge}

    def _daemons(self, host, daemons, own):
        """Processes serving BMCs: an orphan is a leftover; one of a state
        directory that is no surveyed hostagent's, another's."""
        for daemon in daemons:
            where = (host, daemon['kind'], daemon['directory'])
            if any(key[1:3] == where[1:] for key in self.entries):
                continue  # a hostagent of the same machine reported it
            pids = ', '.join(map(str, daemon['pids']))
            if daemon['orphan']:
                self._add(*where, LEFTOVER, detail='pid %s: %s' % (
                    pids, daemon['orphan']))
            elif not any(daemon['directory'].startswith(directory + '/')
                         for directory in own):
                self._add(*where, OTHER, detail='pid %s, of another state '
                          'directory' % pids)

    # The cloud

    def _cloud(self):
        rows = {kind: {name: row for (host, _), records in
                       self.records.items() if host == constants.CLOUD_HOST
                       for (k, name), row in records.items() if k == kind}
                for kind in ('ironic_node', 'nova_flavor')}
        if not any(rows.values()):
            return
        try:
            conn = self.conductor.cloud.connection
        except Exception as e:
            self._add(constants.CLOUD_HOST, 'cloud', constants.CLOUD_HOST,
                      UNCHECKED, detail=str(e))
            return
        clusters = {c.name: c for c in self.clusters.values()}
        for service, check, records in (
                ('Ironic', self._ironic, rows['ironic_node']),
                ('Nova', self._flavors, rows['nova_flavor']),
                ('Placement', self._placement, rows['ironic_node'])):
            if not records:
                continue
            try:
                check(conn, clusters, records)
            except Exception as e:
                self._add(constants.CLOUD_HOST, service.lower(), service,
                          UNCHECKED, detail='%s could not be asked: %s: %s' % (
                              service, type(e).__name__, e))

    def _ironic(self, conn, clusters, enrolled):
        current, ports = ironic.nodes_and_ports(conn)
        nodes = {n['uuid']: n for n in self.nodes}
        for node_uuid, row in sorted(enrolled.items()):
            cluster = clusters[row['cluster']]
            node = nodes.get(node_uuid)
            where = (constants.CLOUD_HOST, 'ironic node', node['name'] if node
                     else node_uuid, cluster.name, self._owner(cluster))
            if node_uuid not in current:
                self._add(*where[:3], states.PART_MISSING, *where[3:],
                          'Ironic has no node %s' % node_uuid)
            elif node is not None:
                changes = ironic_changes(
                    current[node_uuid], ports.get(node_uuid, []),
                    reconcile.view(cluster.spec, cluster.uuid, node,
                                   self._facts(node['hypervisor'])),
                    cluster.spec)
                if changes:
                    self._add(*where[:3], states.PART_DIFFERS, *where[3:],
                              ', '.join(changes))

    def _flavors(self, conn, clusters, flavors):
        for name, row in sorted(flavors.items()):
            cluster = clusters[row['cluster']]
            where = (constants.CLOUD_HOST, 'nova flavor', name)
            owner = self._owner(cluster)
            wanted = {f['name']: f for f in (
                reconcile.nova_flavor(cluster.spec, f)
                for f in cluster.spec['nova_flavors'])}.get(name)
            current = nova.find_flavor(conn, name)
            if current is None:
                self._add(*where, states.PART_MISSING, cluster.name, owner)
            elif wanted is None:
                self._add(*where, UNRECORDED, cluster.name, owner,
                          'the spec of cluster %s has no such flavor'
                          % cluster.name)
            else:
                changes = nova.flavor_changes(conn, current, wanted)
                if changes:
                    self._add(*where, states.PART_DIFFERS, cluster.name, owner,
                              ', '.join(changes))

    def _placement(self, conn, clusters, enrolled):
        aggregates = self.db.list_aggregates()
        nodes = {n['uuid']: n for n in self.nodes if n['uuid'] in enrolled}
        if not (aggregates and nodes):
            return
        for node_uuid in sorted(placement_aggregates.out_of_step(
                conn, aggregates, {u: n['hypervisor']
                                   for u, n in nodes.items()})):
            node = nodes[node_uuid]
            cluster = clusters[node['cluster']]
            self._add(constants.CLOUD_HOST, 'placement aggregates',
                      node['name'], states.PART_DIFFERS, cluster.name,
                      self._owner(cluster),
                      'the resource provider %s is not in exactly the '
                      'aggregates of hypervisor %s' % (node_uuid,
                                                       node['hypervisor']))

    # Cleaning

    def clean(self, report):
        """Have each hostagent remove what carries the marks of the dead
        deployments it saw, and stop the orphan processes, as ``report``
        (of this audit's run) found them."""
        for host in sorted(self.surveys):
            leftovers = [e for e in report['drift']
                         if e['status'] == LEFTOVER
                         and self._seen_by(host, e)]
            owners = sorted({names.deployment_mark(e['mark'])
                             for e in leftovers if e['kind'] not in DAEMONS})
            daemons = [[e['kind'], e['name']] for e in leftovers
                       if e['kind'] in DAEMONS]
            # Even with nothing to remove: the hostagent forgets the notes
            # of deployments ended since (see hostagent.audit).
            try:
                done = self._request(host, 'clean', owners=owners,
                                     daemons=daemons)
            except Exception as e:
                LOG.warning('Could not clean %s: %s', host, e)
                continue
            for kind, name, error in done['failed']:
                LOG.warning('Could not remove %s %s on %s: %s', kind, name,
                            host, error)

    def _seen_by(self, host, found):
        """Whether the entry ``found`` comes from ``host``'s audit."""
        survey = self.surveys[host]
        if found['kind'] in DAEMONS:
            return any(d['directory'] == found['name']
                       for d in survey['daemons'])
        return any((t['kind'], t['name'], t['mark']) == (
            found['kind'], found['name'], found['mark'])
            for t in survey['things'])


def ironic_changes(current, ports, view, spec):
    """What differs of the Ironic node ``current`` (with its ``ports``)
    from what registration sets for the node ``view``: its fields, the
    driver_info of its BMC (the password, which reads back masked,
    aside) and its ports by MAC."""
    wanted = view['ironic']
    have = current.driver_info or {}
    changes = sorted(ironic.node_updates(
        current, dict(wanted['fields'], driver_info=have), {}))
    if sorted(current.traits or []) != sorted(wanted['traits']):
        changes.append('traits')
    changes += ['driver_info %s' % key for key, value in sorted(
        ironic.bmc_driver_info(view['bmc'], spec).items())
        if not key.endswith('password') and str(have.get(key)) != str(value)]
    macs = {nic['mac'].lower(): nic for nic in view['record']['nics']}
    found = {port.address.lower(): port for port in ports}
    changes += ['port %s missing' % mac
                for mac in sorted(macs.keys() - found.keys())]
    changes += ['port %s unrecorded' % mac
                for mac in sorted(found.keys() - macs.keys())]
    return changes + ['port %s physical_network' % mac
                      for mac in sorted(macs.keys() & found.keys())
                      if found[mac].physical_network
                      != macs[mac]['physnet']]
