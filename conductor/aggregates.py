"""Host aggregates and availability zones, with the rules of Nova's
host-aggregates blueprint.

An aggregate groups hypervisors and carries metadata; it belongs to at
most one availability zone, and a hypervisor to at most one zone: the
zone of its aggregates that have one, else the default zone. Every
change is checked and made under the lock scheduling holds, so a
deploy never sees half a change.

Placement follows (tenks.cloud.placement_aggregates): when a host joins or
leaves an aggregate, the resource providers of its enrolled nodes join
or leave the Placement aggregate of the same UUID; a deleted
aggregate's UUID leaves every provider of Tenks' nodes. That is
advisory: the change stands, and what Placement refused comes back as
``warnings``. A running conductor also passes over every enrolled node
now and then (``[openstack] placement_aggregates_interval``), for the
providers nova-compute made since and the changes Placement refused.
"""

import threading

import sqlalchemy as sa
from oslo_log import log as logging

from tenks import exceptions
from tenks.cloud import placement_aggregates

LOG = logging.getLogger(__name__)

NAME_MAX = 255
# A value not given (a zone of None clears it).
UNSET = object()


def check_name(name, aggregate):
    if not isinstance(name, str) or not name.strip() or len(
            name) > NAME_MAX:
        raise exceptions.AggregateInvalid(
            aggregate=aggregate,
            reason='a name must be 1 to %d characters, not only blanks, '
                   'not %r' % (NAME_MAX, name))


def check_zone(zone, aggregate):
    if zone is None:
        return
    if not isinstance(zone, str) or not zone.strip() or len(
            zone) > NAME_MAX or ':' in zone:
        raise exceptions.AggregateInvalid(
            aggregate=aggregate,
            reason='an availability zone name must be 1 to %d characters, '
                   'not only blanks, without ":", not %r' % (NAME_MAX, zone))


def check_metadata(metadata, aggregate):
    for key, value in metadata.items():
        if not isinstance(key, str) or not key or len(key) > NAME_MAX:
            raise exceptions.AggregateInvalid(
                aggregate=aggregate,
                reason='a metadata key must be 1 to %d characters, not %r'
                       % (NAME_MAX, key))
        if key == 'availability_zone':
            raise exceptions.AggregateInvalid(
                aggregate=aggregate,
                reason='the availability zone is set with the zone, not as '
                       'metadata')
        if not isinstance(value, str) or len(value) > NAME_MAX:
            raise exceptions.AggregateInvalid(
                aggregate=aggregate,
                reason='metadata %s: a value must be a string of at most '
                       '%d characters, not %r' % (key, NAME_MAX, value))


def find(aggregates, ident):
    """The aggregate of ``aggregates`` with this id, UUID or name."""
    ident = str(ident)
    for key in ('id', 'uuid', 'name'):
        for aggregate in aggregates:
            if str(aggregate[key]) == ident:
                return aggregate
    raise exceptions.AggregateNotFound(aggregate=ident)


def host_zones(aggregates, host, skip=None):
    """{zone: aggregate name} of the aggregates of ``host`` that have a
    zone, but ``skip`` (an aggregate id)."""
    return {a['availability_zone']: a['name'] for a in aggregates
            if host in a['hosts'] and a['availability_zone'] is not None
            and a['id'] != skip}


def host_views(aggregates, hypervisors, default_zone):
    """{host: {'enabled', 'maintenance', 'availability_zone',
    'aggregates': [{name, uuid, metadata}]}}: what the scheduler needs to
    know of each host."""
    result = {}
    for hypervisor in hypervisors:
        host = hypervisor['host']
        mine = [a for a in aggregates if host in a['hosts']]
        zones = sorted(host_zones(mine, host))
        result[host] = {
            'enabled': hypervisor['enabled'],
            'maintenance': bool(hypervisor.get('maintenance')),
            'availability_zone': zones[0] if zones else default_zone,
            'aggregates': [{'name': a['name'], 'uuid': a['uuid'],
                            'metadata': a['metadata']} for a in mine],
        }
    return result


class Aggregates:
    """The aggregate API of the conductor, on its state database.

    ``lock``: a context manager factory held around every change (the
    conductor's scheduling lock); ``cloud``: the tenks.cloud.Cloud whose
    Placement mirrors the aggregates, if any.
    """

    def __init__(self, db, lock, default_zone, cloud=None):
        self.db = db
        self.lock = lock
        self.default_zone = default_zone
        self.cloud = cloud
        self._stopping = threading.Event()
        self._passes = None

    def start_mirror(self, interval):
        """Pass over every enrolled node every ``interval`` seconds (0:
        never), in a thread of its own, until stop_mirror."""
        if interval:
            self._passes = threading.Thread(
                target=self._mirror_forever, args=(interval,),
                name='placement-aggregates', daemon=True)
            self._passes.start()

    def stop_mirror(self):
        self._stopping.set()
        if self._passes is not None:
            self._passes.join()

    def _mirror_forever(self, interval):
        logged = set()
        while not self._stopping.wait(interval):
            try:
                warnings = self.mirror_all()
            except Exception as e:
                warnings = ['Placement aggregates not checked (%s: %s)' % (
                    type(e).__name__, e)]
            # The same refusal every pass is said once.
            for warning in sorted(set(warnings) - logged):
                LOG.warning('%s', warning)
            logged = set(warnings)

    def mirror_all(self):
        """Bring in step the providers of all enrolled nodes that are
        not (one member_of query per aggregate when all are); the
        warnings."""
        nodes = placement_aggregates.enrolled(self.db)
        aggregates = self.db.list_aggregates()
        if not nodes or not aggregates or self.cloud is None:
            return []
        conn = self.cloud.connection
        if not placement_aggregates.reachable(conn):
            return []
        try:
            stale = placement_aggregates.out_of_step(conn, aggregates, nodes)
        except placement_aggregates.Failed as e:
            return ['Placement %s; did not check the aggregates of the '
                    'nodes\' resource providers' % e]
        names = {n.uuid: n.name for n in self.db.list_nodes()
                 if n.uuid in stale}
        return placement_aggregates.sync(self.db, conn, stale,
                                         names=names).warnings

    def _mirror(self, host=None, gone=None):
        """Placement in step for the enrolled nodes of ``host``, or
        those in the aggregate ``gone`` (a UUID) being deleted; the
        warnings."""
        nodes = placement_aggregates.enrolled(self.db, host)
        if not nodes or self.cloud is None:
            return []
        try:
            conn = self.cloud.connection
            if not placement_aggregates.reachable(conn):
                return []
            if gone is not None:
                members = placement_aggregates.members(conn, gone)
                nodes = {u: h for u, h in nodes.items() if u in members}
            names = {n.uuid: n.name for n in self.db.list_nodes(
                hypervisor=host) if n.uuid in nodes}
            warnings = placement_aggregates.sync(
                self.db, conn, nodes, () if gone is None else (gone,),
                names).warnings
        except Exception as e:
            if not isinstance(e, placement_aggregates.Failed):
                e = 'could not be asked (%s: %s)' % (type(e).__name__, e)
            warnings = ['Placement %s; the resource providers of the nodes '
                        'of %s may not follow the change' % (
                            e, 'host %s' % host if host else
                            'aggregate %s' % gone)]
        for warning in warnings:
            LOG.warning('%s', warning)
        return warnings

    def list(self):
        return self.db.list_aggregates()

    def get(self, ident):
        return find(self.db.list_aggregates(), ident)

    def create(self, name, availability_zone=None):
        check_name(name, name)
        check_zone(availability_zone, name)
        with self.lock():
            if any(a['name'] == name for a in self.db.list_aggregates()):
                raise exceptions.AggregateConflict(
                    aggregate=name, reason='the name is taken')
            try:
                self.db.create_aggregate(name, availability_zone)
            except sa.exc.IntegrityError:
                # Another conductor created it between the two steps.
                raise exceptions.AggregateConflict(
                    aggregate=name, reason='the name is taken') from None
            return self.get(name)

    def update(self, ident, values):
        """Rename the aggregate and/or change its zone: ``values`` holds
        ``name``, ``availability_zone`` (None: none) or both."""
        if not isinstance(values, dict):
            raise exceptions.AggregateInvalid(
                aggregate=ident, reason='values must be a mapping')
        unknown = set(values) - {'name', 'availability_zone'}
        if unknown:
            raise exceptions.AggregateInvalid(
                aggregate=ident, reason='cannot change %s' % ', '.join(
                    sorted(unknown)))
        name = values.get('name', UNSET)
        availability_zone = values.get('availability_zone', UNSET)
        with self.lock():
            aggregates = self.db.list_aggregates()
            aggregate = find(aggregates, ident)
            changes = {}
            if name is not UNSET and name != aggregate['name']:
                check_name(name, aggregate['name'])
                if any(a['name'] == name for a in aggregates):
                    raise exceptions.AggregateConflict(
                        aggregate=aggregate['name'],
                        reason='the name %s is taken' % name)
                changes['name'] = name
            if (availability_zone is not UNSET
                    and availability_zone != aggregate['availability_zone']):
                check_zone(availability_zone, aggregate['name'])
                self._check_zone_change(aggregates, aggregate,
                                        availability_zone)
                changes['availability_zone'] = availability_zone
            if changes:
                try:
                    self.db.update_aggregate(aggregate['id'], **changes)
                except sa.exc.IntegrityError:
                    raise exceptions.AggregateConflict(
                        aggregate=aggregate['name'],
                        reason='the name %s is taken' % name) from None
            return self.get(aggregate['id'])

    def _check_zone_change(self, aggregates, aggregate, zone):
        busy = sorted(h for h in aggregate['hosts']
                      if self.db.list_nodes(hypervisor=h))
        if busy:
            raise exceptions.AggregateConflict(
                aggregate=aggregate['name'],
                reason='its zone cannot change while its hosts hold nodes '
                       '(%s)' % ', '.join(busy))
        if zone is None:
            return
        for host in aggregate['hosts']:
            self._check_host_zone(aggregates, aggregate, host, zone)

    @staticmethod
    def _check_host_zone(aggregates, aggregate, host, zone):
        """A host is in at most one availability zone."""
        others = host_zones(aggregates, host, skip=aggregate['id'])
        other = sorted(z for z in others if z != zone)
        if other:
            raise exceptions.AggregateConflict(
                aggregate=aggregate['name'],
                reason='host %s is in availability zone %s (aggregate %s), '
                       'and a host is in at most one zone' % (
                           host, other[0], others[other[0]]))

    def set_metadata(self, ident, metadata):
        """Set the keys of ``metadata``; a None value unsets its key."""
        if not isinstance(metadata, dict):
            raise exceptions.AggregateInvalid(
                aggregate=ident, reason='metadata must be a mapping, not '
                                        '%r' % (metadata,))
        with self.lock():
            aggregate = self.get(ident)
            check_metadata({k: v for k, v in metadata.items()
                            if v is not None}, aggregate['name'])
            merged = dict(aggregate['metadata'])
            for key, value in metadata.items():
                if value is None:
                    if key not in merged:
                        raise exceptions.AggregateInvalid(
                            aggregate=aggregate['name'],
                            reason='it has no metadata %s' % key)
                    del merged[key]
                else:
                    merged[key] = value
            self.db.update_aggregate(aggregate['id'], metadata=merged)
            return self.get(aggregate['id'])

    def delete(self, ident):
        with self.lock():
            aggregate = self.get(ident)
            if aggregate['hosts']:
                raise exceptions.AggregateConflict(
                    aggregate=aggregate['name'],
                    reason='it still has hosts (%s): remove them first'
                           % ', '.join(aggregate['hosts']))
            self.db.delete_aggregate(aggregate['id'])
            # Its hosts went, and their providers with them, unless
            # Placement failed then: try again.
            return {'warnings': self._mirror(gone=aggregate['uuid'])}

    def add_host(self, ident, host):
        with self.lock():
            aggregates = self.db.list_aggregates()
            aggregate = find(aggregates, ident)
            if self.db.get_hypervisor(host) is None:
                raise exceptions.HypervisorNotFound(host=host)
            if host in aggregate['hosts']:
                raise exceptions.AggregateConflict(
                    aggregate=aggregate['name'],
                    reason='host %s is in it already' % host)
            if aggregate['availability_zone'] is not None:
                self._check_host_zone(aggregates, aggregate, host,
                                      aggregate['availability_zone'])
            try:
                self.db.add_aggregate_host(aggregate['id'], host)
            except sa.exc.IntegrityError:
                raise exceptions.AggregateConflict(
                    aggregate=aggregate['name'],
                    reason='host %s is in it already' % host) from None
            return dict(self.get(aggregate['id']),
                        warnings=self._mirror(host))

    def remove_host(self, ident, host):
        with self.lock():
            aggregate = self.get(ident)
            if host not in aggregate['hosts']:
                raise exceptions.AggregateInvalid(
                    aggregate=aggregate['name'],
                    reason='host %s is not in it' % host)
            hypervisor = self.db.get_hypervisor(host)
            if hypervisor is not None and hypervisor.enabled:
                raise exceptions.AggregateConflict(
                    aggregate=aggregate['name'],
                    reason='host %s is enabled: disable it first ("tenks '
                           'hypervisor set --disable %s")' % (host, host))
            self.db.remove_aggregate_host(aggregate['id'], host)
            return dict(self.get(aggregate['id']),
                        warnings=self._mirror(host))

    def host_views(self):
        """The scheduler's view of every registered hypervisor."""
        aggregates, hypervisors = self.db.list_memberships()
        return host_views(aggregates, hypervisors, self.default_zone)
