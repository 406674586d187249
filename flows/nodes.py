"""VM configuration and BMC, nodes in batches of one hypervisor.

A node's volumes, NIC ports, domain and BMC are made, changed or removed
by one hostagent request (``ensure_node`` / ``remove_node``), and
recorded in two short transactions (flows.ledger): the things it may
create are recorded 'creating' before the request, and confirmed (or
forgotten) after it. One task casts the requests of up to BATCH nodes
of a hypervisor at once and awaits them on one thread.
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


# The most nodes one ConvergeNodes or RemoveNodes task handles: their
# requests are cast at once and awaited by one thread, so a stage of n
# nodes has n / 16 atoms to save and holds at most 16 * [conductor]
# workers requests in flight.
BATCH = 16


def _batches(entries, host_of):
    """{(host, k): the k-th BATCH of ``entries`` of that host}, in the
    order of ``entries`` (a plan's: stable for a resume). A node twice
    makes no flow: its two requests would share an id, one answer for
    two waiters."""
    by_host, seen = {}, set()
    for entry in entries:
        if entry['uuid'] in seen:
            raise ValueError('Node %s (%s) is in the plan twice' % (
                entry['name'], entry['uuid']))
        seen.add(entry['uuid'])
        by_host.setdefault(host_of(entry), []).append(entry)
    return {(host, start // BATCH): here[start:start + BATCH]
            for host, here in by_host.items()
            for start in range(0, len(here), BATCH)}


def _node_name(uuid):
    """A node's name in an operation's result (RunReport's
    ``changed_names``) and in the ids of its requests, which stay the
    same across resumes."""
    return 'node:%s' % uuid


def _failed_nodes(failed):
    """The text naming the nodes ``failed`` ([(name, uuid, error)]),
    those with the same error together."""
    by_error = {}
    for name, uuid, error in failed:
        by_error.setdefault(str(error), []).append('%s (%s)' % (name, uuid))
    return '; '.join('%s: %s' % (', '.join(nodes), error)
                     for error, nodes in by_error.items())


def _answer(answer):
    """A request function for the ledger that gives a request_all
    ``answer``: returns it, or raises it if it is an error."""
    if isinstance(answer, Exception):
        raise answer
    return answer


def converge_tasks(entries, passwords, force):
    """ConvergeNodes tasks for the plan's nodes ``entries`` that have
    something on a hypervisor, each for at most BATCH nodes of one
    hypervisor, named ``node:<hypervisor>:<k>``."""
    return [ConvergeNodes('node:%s:%d' % key, batch, passwords, force)
            for key, batch in _batches(
                entries, lambda entry: entry['new']['hypervisor']).items()]


class ConvergeNodes(task.Task):
    """Create nodes of one hypervisor, or change them to their new views.

    ``entries``: nodes of the plan ({'uuid', 'action', 'old', 'new',
    'enrol'}). A node not enrolled ends with this task, which marks it
    deployed (and announces one it created). A node whose request failed
    makes the task fail, naming it, once the others are recorded.

    Reversion strategy, node by node: what this operation created goes
    (what the agent said it created, or what it was asked to create
    without an answer); a node it changed gets its old view back. A node
    this operation began is forgotten once nothing of it stays recorded.
    """

    def __init__(self, name, entries, passwords, force):
        """``passwords``: {BMC type: password}."""
        super().__init__(name=name,
                         requires=(base.OPERATION_ID, base.CLUSTER))
        self.entries = entries
        self.passwords = passwords
        self.force = force

    @property
    def host(self):
        return self.entries[0]['new']['hypervisor']

    @property
    def steps(self):
        """The nodes it makes or changes: its share of the progress."""
        return len(self.entries)

    def execute(self, operation_id, cluster):
        svc = context.get()
        calls, begun = [], []
        for entry in self.entries:
            new = entry['new']
            wanted = node_resources(new)
            begun.append((wanted, ledger.begin(
                svc, cluster, self.host, operation_id, wanted,
                node=entry['uuid'],
                new=entry['action'] == constants.CREATE)))
            calls.append(self._ensure_call(
                operation_id, cluster, 'execute', entry['uuid'], new,
                entry['old'], wanted))
        answers = svc.agents.request_all(
            self.host, 'ensure_node', calls, operation=operation_id,
            answered=lambda i, answer: _stepped(operation_id, self.name,
                                                answer))
        done, failed = {}, []
        for entry, (wanted, before), answer in zip(
                self.entries, begun, answers, strict=True):
            if isinstance(answer, Exception):
                if isinstance(answer, REFUSALS):
                    ledger.drop_unrecorded(svc, self.host, wanted, before)
                failed.append((entry, answer))
                continue
            done[entry['uuid']] = self._finish(svc, cluster, operation_id,
                                               entry, wanted, before, answer)
        if failed:
            raise exceptions.NodesNotDeployed(nodes=_failed_nodes(
                [(entry['name'], entry['uuid'], error)
                 for entry, error in failed])) from failed[0][1]
        return {'changed': any(r['changed'] for r in done.values()),
                'changed_names': [_node_name(uuid)
                                  for uuid, r in done.items()
                                  if r['changed']],
                'nodes': done}

    def _ensure_call(self, operation_id, cluster, phase, uuid, view, old,
                     wanted):
        """The ensure_node request (see AgentClient.request_all) that
        brings node ``uuid`` to ``view`` from ``old``; ``wanted``: its
        node_resources."""
        return (base.request_id(operation_id, _node_name(uuid), phase),
                base.late_ensure(cluster, [(kind, name)
                                           for kind, name, _ in wanted]),
                {'node': hostagent_rpcapi.node_request(view, self.passwords,
                                                       old),
                 'owner': view['owner'], 'force': self.force})

    def _finish(self, svc, cluster, operation_id, entry, wanted, before,
                answer):
        """Record what ``answer`` says the node's request did."""
        created = _keys(answer['created'])
        removed = _keys(answer['removed'])
        ledger.finish(svc, self.host, wanted, before, created, operation_id,
                      removed)
        record = entry['new']['record']
        if entry['enrol']:
            _record(svc, entry['uuid'], record)
        else:
            records.finish_node(svc, cluster, record, announce=(
                entry['action'] == constants.CREATE))
        return {'changed': answer['changed'], 'created': sorted(created),
                'removed': sorted(removed),
                'power_state': answer.get('power_state')}

    def revert(self, result, operation_id, cluster, **kwargs):
        svc = context.get()
        mine = {entry['uuid']: [r.as_dict() for r in svc.db.list_resources(
            node=entry['uuid'], operation=operation_id)]
            for entry in self.entries}
        created = [entry for entry in self.entries
                   if entry['action'] == constants.CREATE]
        changed = [entry for entry in self.entries
                   if entry['action'] != constants.CREATE]
        if created:
            self._remove_created(svc, operation_id, cluster, created, mine)
        if changed:
            self._restore_changed(svc, operation_id, cluster, changed, mine)

    def _remove_created(self, svc, operation_id, cluster, entries, mine):
        """Remove what this operation made of the nodes it created, and
        settle their records."""
        made = [entry for entry in entries if mine[entry['uuid']]]
        answers = svc.agents.request_all(self.host, 'remove_node', [(
            base.request_id(operation_id, _node_name(entry['uuid']),
                            'revert'),
            base.late_remove(cluster, self._things(mine[entry['uuid']])),
            {'node': dict(parts_of(mine[entry['uuid']]),
                          name=entry['name']),
             'owner': entry['new']['owner']}) for entry in made],
            operation=operation_id) if made else []
        for entry, answer in zip(made, answers, strict=True):
            ledger.remove_or_keep(
                svc, self.host, self._things(mine[entry['uuid']]),
                'node %s on %s' % (entry['name'], self.host), _answer,
                answer)
        for entry in entries:
            node = svc.db.get_node(entry['uuid'])
            # Failed, kept with what could not be removed, or forgotten;
            # one announced created (deployed) is announced gone.
            if (records.settle_new_node(svc.db, entry['uuid'])
                    and node.state == states.NODE_DEPLOYED):
                svc.notifier.emit('tenks.node.delete.end', cluster,
                                  notifier.node_payload(node))

    @staticmethod
    def _things(rows):
        return [(r['kind'], r['name']) for r in rows]

    def _restore_changed(self, svc, operation_id, cluster, entries, mine):
        """Give the nodes this operation changed their old views back,
        without what it added; what it removed is made again (empty) and
        recorded."""
        calls, begun = [], []
        for entry in entries:
            old, here = entry['old'], mine[entry['uuid']]
            added = dict(old, volumes=[
                {'name': r['name']} for r in here if r['kind'] == 'volume'],
                nics=[_nic(r['remove_args']) for r in here
                      if r['kind'] == 'port'])
            wanted = node_resources(old)
            begun.append((wanted, ledger.begin(
                svc, cluster, self.host, operation_id, wanted,
                node=entry['uuid'])))
            calls.append(self._ensure_call(
                operation_id, cluster, 'revert', entry['uuid'], old, added,
                wanted))
        answers = svc.agents.request_all(self.host, 'ensure_node', calls,
                                         operation=operation_id)
        for entry, (wanted, before), answer in zip(entries, begun, answers,
                                                   strict=True):
            old, here = entry['old'], mine[entry['uuid']]
            if isinstance(answer, Exception):
                LOG.warning('Could not give node %s its old state back '
                            'while reverting: %s', old['name'], answer)
                continue
            # What this revert made again (empty) was part of the node
            # before; what this operation added is gone now, removed or
            # never made.
            kept = {(kind, name) for kind, name, _ in wanted}
            ledger.restore(
                svc, self.host, wanted, before,
                _keys(answer['removed']) | {
                    (r['kind'], r['name']) for r in here
                    if r['kind'] in ('volume', 'port')
                    and (r['kind'], r['name']) not in kept})
            _record(svc, entry['uuid'], old['record'])


def _record(svc, uuid, record):
    svc.db.record_node(uuid, **{k: record[k] for k in records.RECORD_FIELDS})


def _stepped(operation_id, task_name, answer, *fine):
    """Count a node of task ``task_name`` done in the operation's
    progress (flows.context.step) if the hostagent's ``answer`` is no
    error, or one of the ``fine`` errors."""
    if not isinstance(answer, Exception) or isinstance(answer, fine):
        context.step(operation_id, task_name)


def removal_tasks(entries, force=False):
    """RemoveNodes tasks for the nodes ``entries`` ([{'uuid', 'name',
    'hypervisor', 'rows'}]: ``rows``, the node's recorded resources as
    dicts), each for at most BATCH nodes of one hypervisor, named
    ``remove:<hypervisor>:<k>`` (stable for a resume)."""
    return [RemoveNodes('remove:%s:%d' % key, batch, force)
            for key, batch in _batches(
                entries, lambda entry: entry['hypervisor']).items()]


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
                # A node is a step done once its last host answered.
                last = [node.hosts[-1] == host for node in here]

                def answered(i, answer, last=last):
                    if last[i]:
                        _stepped(operation_id, self.name, answer,
                                 exceptions.ResourceConflict)

                answers = svc.agents.request_all(
                    host, 'remove_node',
                    [node.call(operation_id, cluster, host) for node in here],
                    operation=operation_id, answered=answered)
                for node, answer in zip(here, answers, strict=True):
                    node.answered(svc, host, answer)
        failed = [node for node in nodes if node.error is not None]
        # The nodes that went, forgotten in one transaction.
        records.forget_nodes(svc, cluster, [
            (node.uuid, *node.last) for node in nodes if node.error is None])
        for node in failed:
            node.fail(svc)
        if failed:
            raise exceptions.NodesNotRemoved(nodes=_failed_nodes(
                [(node.name, node.uuid, node.error) for node in failed])
            ) from failed[0].error
        return {'changed': any(node.changed for node in nodes),
                'changed_names': [node.task_name for node in nodes
                                  if node.changed],
                'warnings': [w for node in nodes for w in node.warnings]}

    def revert(self, result, **kwargs):
        pass
