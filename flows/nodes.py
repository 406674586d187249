"""VM configuration and BMC, one task per node.

A node's volumes, NIC ports, domain and BMC are made, changed or removed
by one hostagent request (``ensure_node`` / ``remove_node``), and
recorded in two short transactions (flows.ledger): the things it may
create are recorded 'creating' before the request, and confirmed (or
forgotten) after it.
"""

from concurrent import futures

from oslo_log import log as logging
from taskflow import task

from flows import base
from flows import context
from flows import ledger
from flows import records
from flows import registration
from hostagent import rpcapi as hostagent_rpcapi
from tenks import constants
from tenks import exceptions
from tenks import notifier
from tenks import states

LOG = logging.getLogger(__name__)

# What a hostagent refuses a node request with before changing anything.
REFUSALS = (exceptions.ResourceConflict, exceptions.NodeRunning,
            exceptions.InvalidNodeRequest)


def node_resources(view):
    """[(kind, name, remove args)] of what a node (a plan view) has on
    its hypervisor, as recorded."""
    owner = view['owner']
    # An existing volume is not ours: never recorded, never removed.
    things = [('volume', vol['name'], {'pool': view['pool'],
                                       'name': vol['name'], 'owner': owner})
              for vol in view['volumes'] if not vol.get('existing')]
    things += [('port', nic['tap'], port_args(nic, owner))
               for nic in view['nics']]
    things.append(('domain', view['name'], {'name': view['name'],
                                            'owner': owner}))
    things.append(('bmc', view['name'], {'domain': view['name'],
                                         'owner': owner}))
    return things


def port_args(nic, owner):
    """The remove args of a NIC's port; the default bridge_type left
    out, as in the records made before there was a choice."""
    args = {'name': nic['tap'], 'owner': owner}
    if nic.get('bridge_type', constants.DEFAULT_BRIDGE_TYPE) != (
            constants.DEFAULT_BRIDGE_TYPE):
        args['bridge_type'] = nic['bridge_type']
    return args


def _nic(args):
    """A NIC of a request that removes it, from its port's remove args."""
    return {'tap': args['name'],
            'bridge_type': args.get('bridge_type',
                                    constants.DEFAULT_BRIDGE_TYPE)}


def parts_of(rows):
    """The ``node`` argument of the hostagent's remove_node, from the
    recorded resources (dicts) of one node."""
    node = {'name': None, 'pool': None, 'volumes': [], 'nics': []}
    for row in rows:
        args = row['remove_args']
        if row['kind'] == 'volume':
            node['pool'] = args['pool']
            node['volumes'].append({'name': args['name']})
        elif row['kind'] == 'port':
            node['nics'].append(_nic(args))
        elif row['kind'] == 'domain':
            node['name'] = args['name']
        elif row['kind'] == 'bmc':
            node['name'] = args['domain']
    return node


def _keys(pairs):
    return {tuple(pair) for pair in pairs}


class ConvergeNode(task.Task):
    """Create a node on its hypervisor, or change it to its new view.

    ``entry``: a node of the plan ({'uuid', 'action', 'old', 'new'}).
    ``finishes``: this task is the node's last, so it marks the node
    deployed (and announces a node it created).

    Reversion strategy: what this operation created goes (what the
    agent said it created, or what it was asked to create without an
    answer); a node it changed gets its old view back. A node this
    operation began is forgotten once nothing of it stays recorded.
    """

    def __init__(self, entry, passwords, force, finishes):
        """``passwords``: {BMC type: password}."""
        super().__init__(name='node:%s' % entry['uuid'],
                         requires=(base.OPERATION_ID, base.CLUSTER))
        self.entry = entry
        self.passwords = passwords
        self.force = force
        self.finishes = finishes

    @property
    def host(self):
        return self.entry['new']['hypervisor']

    @property
    def uuid(self):
        return self.entry['uuid']

    def execute(self, operation_id, cluster):
        svc = context.get()
        new, old = self.entry['new'], self.entry['old']
        wanted = node_resources(new)
        before = ledger.begin(
            svc, cluster, self.host, operation_id, wanted, node=self.uuid,
            new=self.entry['action'] == constants.CREATE)
        try:
            result = svc.agents.request(
                self.host, 'ensure_node',
                base.request_id(operation_id, self.name),
                operation=operation_id, late=base.late_ensure(
                    cluster, [(kind, name) for kind, name, _ in wanted]),
                node=hostagent_rpcapi.node_request(new, self.passwords, old),
                owner=new['owner'], force=self.force)
        except REFUSALS:
            ledger.drop_unrecorded(svc, self.host, wanted, before)
            raise
        created = _keys(result['created'])
        removed = _keys(result['removed'])
        ledger.finish(svc, self.host, wanted, before, created, operation_id,
                      removed)
        if self.finishes:
            records.finish_node(svc, cluster, new['record'],
                                announce=(self.entry['action']
                                          == constants.CREATE))
        else:
            self._record(svc, new['record'])
        return {'changed': result['changed'],
                'created': sorted(created), 'removed': sorted(removed),
                'power_state': result.get('power_state')}

    def _record(self, svc, record):
        svc.db.record_node(self.uuid, **{
            k: record[k] for k in records.RECORD_FIELDS})

    def revert(self, result, operation_id, cluster, **kwargs):
        svc = context.get()
        mine = [r.as_dict() for r in svc.db.list_resources(
            node=self.uuid, operation=operation_id)]
        if self.entry['action'] == constants.CREATE:
            if mine:
                things = [(r['kind'], r['name']) for r in mine]
                ledger.remove_or_keep(
                    svc, self.host, things, 'node %s on %s' % (
                        self.entry['name'], self.host),
                    svc.agents.request, self.host, 'remove_node',
                    base.request_id(operation_id, self.name, 'revert'),
                    operation=operation_id,
                    late=base.late_remove(cluster, things),
                    node=dict(parts_of(mine), name=self.entry['name']),
                    owner=self.entry['new']['owner'])
            node = svc.db.get_node(self.uuid)
            # Failed, kept with what could not be removed, or forgotten;
            # one announced created (deployed) is announced gone.
            if (records.settle_new_node(svc.db, self.uuid)
                    and node.state == states.NODE_DEPLOYED):
                svc.notifier.emit('tenks.node.delete.end', cluster,
                                  notifier.node_payload(node))
            return
        old = self.entry['old']
        # The old view back, without what this operation added; what it
        # removed is made again (empty) and recorded.
        added = dict(old, volumes=[
            {'name': r['name']} for r in mine if r['kind'] == 'volume'],
            nics=[_nic(r['remove_args']) for r in mine
                  if r['kind'] == 'port'])
        wanted = node_resources(old)
        before = ledger.begin(svc, cluster, self.host, operation_id, wanted,
                              node=self.uuid)
        try:
            result = svc.agents.request(
                self.host, 'ensure_node',
                base.request_id(operation_id, self.name, 'revert'),
                operation=operation_id, late=base.late_ensure(
                    cluster, [(kind, name) for kind, name, _ in wanted]),
                node=hostagent_rpcapi.node_request(old, self.passwords,
                                                   added),
                owner=old['owner'], force=self.force)
        except Exception as e:
            LOG.warning('Could not give node %s its old state back while '
                        'reverting: %s', old['name'], e)
            return
        # What this revert made again (empty) was part of the node before;
        # what this operation added is gone now, removed or never made.
        ledger.restore(
            svc, self.host, wanted, before, _keys(result['removed']) | {
                (r['kind'], r['name']) for r in mine
                if r['kind'] in ('volume', 'port')
                and (r['kind'], r['name']) not in {
                    (kind, name) for kind, name, _ in wanted}})
        self._record(svc, old['record'])


# The most nodes one RemoveNodes task removes: their requests are cast
# at once and awaited by one thread, so a stage of n nodes has n / 16
# atoms to save and holds at most 16 * [conductor] workers requests in
# flight.
REMOVAL_BATCH = 16


def removal_tasks(entries, force=False):
    """RemoveNodes tasks for the nodes ``entries`` ([{'uuid', 'name',
    'hypervisor', 'rows'}]: ``rows``, the node's recorded resources as
    dicts), each for at most REMOVAL_BATCH nodes of one hypervisor, named
    ``remove:<hypervisor>:<k>`` (stable for a resume)."""
    by_host = {}
    for entry in entries:
        by_host.setdefault(entry['hypervisor'], []).append(entry)
    return [RemoveNodes('remove:%s:%d' % (host, start // REMOVAL_BATCH),
                        here[start:start + REMOVAL_BATCH], force)
            for host, here in by_host.items()
            for start in range(0, len(here), REMOVAL_BATCH)]


class _NodeRemoval:
    """One node of a RemoveNodes task: its requests, host by host in
    the order of their names, and what they did."""

    def __init__(self, entry):
        self.uuid = entry['uuid']
        self.name = entry['name']
        self.host = entry['hypervisor']
        # Its host's, and those a move could not remove from its old
        # host.
        self.by_host = {}
        for row in entry['rows']:
            if row['kind'] != 'ironic_node':
                self.by_host.setdefault(row['hypervisor'], []).append(row)
        self.hosts = sorted(self.by_host)
        self.ironic = [row for row in entry['rows']
                       if row['kind'] == 'ironic_node']
        self.changed = False
        self.warnings = []
        self.error = None
        # The last host's records go with the node's record.
        self.last = None, ()

    @property
    def task_name(self):
        # What the operation's result names it by (RemoveNodes.execute),
        # and its requests' ids.
        return 'remove:%s' % self.uuid

    def things(self, host):
        return [(r['kind'], r['name']) for r in self.by_host[host]]

    def call(self, operation_id, cluster, host):
        """Its remove_node request to ``host``: (request id, late,
        arguments), see AgentClient.request_all."""
        here = self.by_host[host]
        owner = next((r['remove_args']['owner'] for r in here
                      if 'owner' in r['remove_args']), None)
        return (base.request_id(operation_id, self.task_name,
                                'execute' if host == self.host else host),
                base.late_remove(cluster, self.things(host)),
                {'node': dict(parts_of(here), name=self.name),
                 'owner': owner})

    def answered(self, svc, host, answer):
        """Take ``host``'s answer (a result or an error). Records of a
        host before the last go now, those of the last with the node's
        (``forget``)."""
        if isinstance(answer, exceptions.ResourceConflict):
            self.warnings.append('Left parts of node %s on %s: they are no '
                                 'longer ours (%s); their records are '
                                 'dropped' % (self.name, host, answer))
        elif isinstance(answer, Exception):
            self.error = answer
            return
        else:
            self.changed = answer['changed'] or self.changed
        if host == self.hosts[-1]:
            self.last = host, self.things(host)
        else:
            ledger.forget(svc, host, self.things(host))

    def remove_from_ironic(self, svc, force):
        for row in self.ironic:
            try:
                removed = registration.remove_node(svc, force=force,
                                                   **row['remove_args'])
            except Exception as e:
                self.error = e
                return
            self.changed = removed['changed'] or self.changed
            self.warnings += removed['warnings']

    def fail(self, svc):
        """Mark the node failed if a removal answered with an error (part
        of it may be gone)."""
        if not isinstance(self.error, exceptions.AgentTimeout):
            # Unanswered: an answer that comes later settles its records
            # (conductor.late); one that never comes removed nothing.
            svc.db.set_node_state(self.uuid, states.NODE_FAILED)


class RemoveNodes(task.Task):
    """Remove nodes of one hypervisor: each one's Ironic node, then its
    BMC, domain, ports and volumes, then its records.

    ``entries``: see removal_tasks. Something found not ours (replaced by
    somebody else's) is left where it is, with a warning; its record
    goes. A node whose removal failed keeps its records, and is marked
    failed if the failure was an answer (part of it may be gone); the
    others are removed all the same, then the task fails naming it.

    Reversion strategy: none. Removals run last, and a removal is not
    undone; what stays recorded lets a re-run or teardown finish.
    """

    def __init__(self, name, entries, force=False):
        """``force``: remove nodes Ironic deployed."""
        super().__init__(name=name,
                         requires=(base.OPERATION_ID, base.CLUSTER))
        self.entries = entries
        self.force = force

    @property
    def steps(self):
        """The nodes it removes: its share of the stage's progress."""
        return len(self.entries)

    def execute(self, operation_id, cluster):
        svc = context.get()
        nodes = [_NodeRemoval(entry) for entry in self.entries]
        with_ironic = [node for node in nodes if node.ironic]
        if len(with_ironic) > 1:
            # Ironic's client is synchronous; the calls in flight are
            # bounded by the cloud's limit (tenks.cloud.ironic.Bounded).
            with futures.ThreadPoolExecutor(len(with_ironic)) as pool:
                list(pool.map(lambda node: node.remove_from_ironic(
                    svc, self.force), with_ironic))
        elif with_ironic:
            with_ironic[0].remove_from_ironic(svc, self.force)
        # A node's hosts in turn (one that fails ends its turns), the
        # nodes at once.
        for turn in range(max(len(node.hosts) for node in nodes)):
            by_host = {}
            for node in nodes:
                if node.error is None and turn < len(node.hosts):
                    by_host.setdefault(node.hosts[turn], []).append(node)
            for host, here in sorted(by_host.items()):
                answers = svc.agents.request_all(
                    host, 'remove_node',
                    [node.call(operation_id, cluster, host) for node in here],
                    operation=operation_id)
                for node, answer in zip(here, answers, strict=True):
                    node.answered(svc, host, answer)
        failed = [node for node in nodes if node.error is not None]
        # The nodes that went, forgotten in one transaction.
        records.forget_nodes(svc, cluster, [
            (node.uuid, *node.last) for node in nodes if node.error is None])
        for node in failed:
            node.fail(svc)
        if failed:
            raise exceptions.NodesNotRemoved(nodes='; '.join(
                '%s (%s): %s' % (node.name, node.uuid, node.error)
                for node in failed)) from failed[0].error
        return {'changed': any(node.changed for node in nodes),
                'changed_names': [node.task_name for node in nodes
                                  if node.changed],
                'warnings': [w for node in nodes for w in node.warnings]}

    def revert(self, result, **kwargs):
        pass
