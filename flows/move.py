"""The move flow: nodes of one cluster moved to other hypervisors (host
maintenance), built from the operation's plan (conductor.moves).

For each node, in a chain: power it off at its old host and serve its
volumes there; make it at the new host from them (volumes, ports,
domain, BMC); point its Ironic node at the new BMC and ports; record it
at the new host and remove it from the old one; power it on again if it
ran. Then the cluster's pool and bridges go from hosts it left.

A node whose record names its new host has moved: no revert touches it
again, so a failure of one node's move leaves the nodes that moved
where they are and the others whole at their old place, each with the
cluster's pool and bridges of its host: a revert keeps those of a host
the cluster still has a node on, and removes those of a host it left.
"""

from oslo_log import log as logging
from taskflow import task
from taskflow.patterns import linear_flow
from taskflow.patterns import unordered_flow

from flows import base
from flows import context
from flows import deploy
from flows import host_setup
from flows import ledger
from flows import nodes
from flows import records
from flows import registration
from flows import teardown
from hostagent import rpcapi as hostagent_rpcapi
from tenks import constants
from tenks import reconcile
from tenks import states
from tenks.cloud import placement_aggregates

LOG = logging.getLogger(__name__)



def get_move_flow(operation_id):
    """Flow factory (module level: it is saved by import path)."""
    operation = context.get().db.get_operation(operation_id)
    plan = operation.plan
    passwords = reconcile.bmc_passwords(operation.spec)
    flow = linear_flow.Flow('move:%s' % plan['cluster'])
    flow.add(LeftHosts(plan['host_remove']))
    if plan['host_ensure']:
        flow.add(host_setup.host_setup_flow(plan['host_ensure'], HOST_TASKS))
    moving = unordered_flow.Flow('moves')
    for move in plan['moves']:
        moving.add(move_flow(move, passwords))
    flow.add(moving, *deploy.host_removal(plan['host_remove']))
    return flow


def has_nodes(svc, cluster, host):
    """Whether the record has a node of ``cluster`` on ``host``."""
    return bool(svc.db.list_nodes(cluster=cluster, hypervisor=host))


class _KeptWhileUsed:
    """A host thing this move makes, kept by a revert (with its record)
    while a node of the cluster is on its host: one that moved there
    before another failed."""

    def revert(self, result, operation_id, cluster, **kwargs):
        if not has_nodes(context.get(), cluster, self.host):
            super().revert(result, operation_id, cluster, **kwargs)


class MovePool(_KeptWhileUsed, base.EnsureResource):
    kind = 'pool'


class MoveBridge(_KeptWhileUsed, base.EnsureResource):
    kind = 'bridge'


class MoveUplink(_KeptWhileUsed, base.EnsureResource):
    kind = 'uplink'


HOST_TASKS = {'pool': MovePool, 'bridge': MoveBridge, 'uplink': MoveUplink}


class LeftHosts(task.Task):
    """First of the flow, so that its revert runs last: the host things
    of the cluster (``rows``, resource dicts) on hosts its moves empty.

    Reversion strategy: remove those of a host the cluster has no node
    left on (every node there moved before the failure), as the flow
    would have; what cannot be removed stays recorded, for a teardown.
    """

    def __init__(self, rows):
        super().__init__(name='left-hosts', requires=(base.OPERATION_ID,
                                                      base.CLUSTER))
        self.rows = rows

    def execute(self, operation_id, cluster):
        pass

    def revert(self, result, operation_id, cluster, **kwargs):
        svc = context.get()
        rows = [row for row in self.rows
                if not has_nodes(svc, cluster, row['hypervisor'])
                and svc.db.get_resource(row['hypervisor'], row['kind'],
                                        row['name']) is not None]
        rows.sort(key=lambda row: constants.HOST_REMOVAL.index(row['kind']))
        for row in rows:
            thing = '%s:%s:%s' % (row['kind'], row['hypervisor'], row['name'])
            try:
                result = teardown.remove(svc, row, base.request_id(
                    operation_id, self.name, 'revert-' + thing),
                    operation_id, cluster)
            except Exception as e:
                LOG.warning('Could not remove %s, of a host the cluster '
                            'left: %s', thing, e)
                continue
            for warning in result.get('warnings', ()):
                LOG.warning('%s', warning)


def move_flow(move, passwords):
    flow = linear_flow.Flow('move-node:%s' % move['uuid'])
    flow.add(ExportNode(move), PlaceNode(move, passwords))
    if move['new']['ironic'] is not None:
        flow.add(MoveIronicNode(move))
    flow.add(RetireNode(move), StartNode(move))
    return flow


def has_moved(svc, move):
    """Whether the node's record names its new host."""
    node = svc.db.get_node(move['uuid'])
    return node is not None and node.hypervisor == move['target']


class _MoveTask(task.Task):
    """A step of one node's move, named ``<node>:<step>`` so that the
    operation's progress counts each node's steps."""

    step = None

    def __init__(self, move, **kwargs):
        super().__init__(name='%s:%s' % (move['name'], self.step),
                         requires=(base.OPERATION_ID, base.CLUSTER),
                         **kwargs)
        self.move = move

    def request(self, svc, host, method, operation_id, phase='execute',
                **kwargs):
        return svc.agents.request(
            host, method, base.request_id(operation_id, self.name, phase),
            operation=operation_id, **kwargs)


def export_key(move):
    return 'export:%s' % move['uuid']


class ExportNode(_MoveTask):
    """Power the node off at its old host, which then serves its volumes.

    Reversion strategy: unless the node has moved, stop serving them and
    power it on again where it was if it ran.
    """

    step = 'export'

    def __init__(self, move):
        super().__init__(move, provides=export_key(move))

    def execute(self, operation_id, cluster):
        old = self.move['old']
        return self.request(
            context.get(), self.move['source'], 'export_node', operation_id,
            node={'name': old['name'], 'pool': old['pool'],
                  'volumes': [{'name': vol['name']}
                              for vol in old['volumes']]},
            owner=old['owner'])

    def revert(self, result, operation_id, cluster, **kwargs):
        svc = context.get()
        if has_moved(svc, self.move):
            return
        source, name = self.move['source'], self.move['name']
        try:
            self.request(svc, source, 'close_export', operation_id,
                         'revert', name=name)
            if isinstance(result, dict) and (result['power_state']
                                             not in states.DOMAIN_STOPPED):
                self.request(svc, source, 'power_node', operation_id,
                             'revert-power', name=name,
                             owner=self.move['old']['owner'], on=True)
        except Exception as e:
            LOG.warning('Could not give node %s back its power state on %s '
                        'while reverting its move: %s', name, source, e)


class PlaceNode(_MoveTask):
    """Make the node at its new host: its volumes copied from the old
    host, its ports, domain and BMC.

    Reversion strategy: unless the node has moved, remove from the new
    host what this operation made there (by owner mark).
    """

    step = 'place'

    def __init__(self, move, passwords):
        super().__init__(move, rebind={'export': export_key(move)})
        self.passwords = passwords

    def execute(self, operation_id, cluster, export):
        svc = context.get()
        new, host = self.move['new'], self.move['target']
        served = export['volumes']
        volumes = [dict(vol, source={'url': served[vol['name']]['url'],
                                     'token': served[vol['name']]['token'],
                                     'backing': False})
                   for vol in new['volumes']]
        wanted = nodes.node_resources(new)
        before = ledger.begin(svc, cluster, host, operation_id, wanted,
                              node=self.move['uuid'], new=True)
        try:
            result = self.request(
                svc, host, 'ensure_node', operation_id,
                late=base.late_ensure(
                    cluster, [(kind, name) for kind, name, _ in wanted]),
                node=hostagent_rpcapi.node_request(
                    dict(new, volumes=volumes), self.passwords),
                owner=new['owner'], force=False)
        except nodes.REFUSALS:
            ledger.drop_unrecorded(svc, host, wanted, before)
            raise
        created = {tuple(pair) for pair in result['created']}
        ledger.finish(svc, host, wanted, before, created, operation_id)
        return {'changed': True, 'created': sorted(created)}

    def revert(self, result, operation_id, cluster, **kwargs):
        svc = context.get()
        if has_moved(svc, self.move):
            return
        host = self.move['target']
        rows = [r.as_dict() for r in svc.db.list_resources(
            node=self.move['uuid'], operation=operation_id, hypervisor=host)]
        if not rows:
            return
        things = [(r['kind'], r['name']) for r in rows]
        ledger.remove_or_keep(
            svc, host, things, 'the new parts of node %s on %s' % (
                self.move['name'], host),
            self.request, svc, host, 'remove_node', operation_id, 'revert',
            late=base.late_remove(cluster, things),
            node=dict(nodes.parts_of(rows), name=self.move['name']),
            owner=self.move['new']['owner'])


class MoveIronicNode(registration.EnsureIronicNode):
    """Point the node's Ironic node at its new BMC and ports; its
    provision state stays.

    Reversion strategy: unless the node has moved, its old driver_info
    and ports back.
    """

    def __init__(self, move):
        super().__init__({'uuid': move['uuid'], 'action': 'update',
                          'old': move['old'], 'new': move['new']},
                         finishes=False)
        self.move = move
        self.name = '%s:ironic' % move['name']

    def revert(self, result, operation_id, cluster, **kwargs):
        if not has_moved(context.get(), self.move):
            super().revert(result, operation_id, cluster, **kwargs)


class RetireNode(_MoveTask):
    """Record the node at its new host, then remove it from the old one
    and stop serving its volumes there.

    Reversion strategy: none. Once recorded at its new host the node has
    moved; what cannot be removed from the old host stays recorded, with
    a warning, for a teardown to finish.
    """

    step = 'retire'

    def execute(self, operation_id, cluster):
        svc = context.get()
        record = self.move['new']['record']
        svc.db.record_node(self.move['uuid'], hypervisor=self.move['target'],
                           **{k: record[k] for k in records.RECORD_FIELDS})
        source, name = self.move['source'], self.move['name']
        rows = [r.as_dict() for r in svc.db.list_resources(
            node=self.move['uuid'], hypervisor=source)]
        things = [(r['kind'], r['name']) for r in rows]
        warnings = []
        try:
            _, conflict = ledger.remove(
                svc, source, things, self.request, svc, source,
                'remove_node', operation_id,
                late=base.late_remove(cluster, things),
                node=dict(nodes.parts_of(rows), name=name),
                owner=self.move['old']['owner'])
        except Exception as e:
            warnings.append('Node %s moved to %s, but its old parts on %s '
                            'could not be removed (%s): they stay recorded, '
                            'and a teardown removes them' % (
                                name, self.move['target'], source, e))
        else:
            if conflict is not None:
                warnings.append('Left parts of node %s on %s: they are no '
                                'longer ours (%s)' % (name, source, conflict))
        try:
            self.request(svc, source, 'close_export', operation_id,
                         name=name)
        except Exception as e:
            warnings.append('Could not stop serving the volumes of node %s '
                            'on %s: %s' % (name, source, e))
        if self.move['new']['ironic'] is not None:
            # Its provider follows it into the new host's aggregates
            # (advisory: a later pass or deploy does it otherwise).
            try:
                warnings += placement_aggregates.sync(
                    svc.db, svc.cloud.connection,
                    {self.move['uuid']: self.move['target']},
                    names={self.move['uuid']: name}).warnings
            except Exception as e:
                warnings.append('Placement: the provider of node %s was not '
                                'moved into the aggregates of %s: %s' % (
                                    name, self.move['target'], e))
        return {'changed': True, 'warnings': warnings}

    def revert(self, result, **kwargs):
        pass


class StartNode(_MoveTask):
    """Power the node on at its new host if it ran at the old one.

    Reversion strategy: none; the node has moved.
    """

    step = 'start'

    def __init__(self, move):
        super().__init__(move, rebind={'export': export_key(move)})

    def execute(self, operation_id, cluster, export):
        if export['power_state'] in states.DOMAIN_STOPPED:
            return {'changed': False}
        new = self.move['new']
        return self.request(context.get(), self.move['target'],
                            'power_node', operation_id, name=new['name'],
                            owner=new['owner'], on=True)

    def revert(self, result, **kwargs):
        pass
