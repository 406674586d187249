"""Operations: recorded, run in a bounded pool of threads, and ended.

Every way an operation can end is recorded as its final state with a
reason; its cluster's lock, taken by whoever submits it, is released
when it ends. A stopping conductor ends what waits for a worker and
hands back, persisted, what still runs after a grace period.

Conductors that share a jobboard (conductor.jobs) post what they accept
as a job instead, and run the jobs they claim; a cluster's lock then
covers only the submit, and its running operation, whose job is on the
board, keeps the cluster busy.
"""

import contextlib
import functools
import threading
import time
import uuid
from concurrent import futures

from oslo_log import log as logging

from conductor import progress
from tenks import exceptions
from tenks import states
from tenks.db import models as db_models

LOG = logging.getLogger(__name__)


class Operations:

    def __init__(self, conf, db, notifier, locks, board=None):
        """``board``: the jobboard (conductor.jobboard.Board) of
        conductors that share their work, or None."""
        self.host = conf.conductor.host
        self.db = db
        self.notifier = notifier
        self.locks = locks
        self.board = board
        self.max_operations = conf.conductor.max_operations
        self._pool = futures.ThreadPoolExecutor(
            max_workers=self.max_operations,
            thread_name_prefix='operation')
        self._running = {}
        # Operations waiting for a worker: {id: what ends one cancelled}.
        self._queued = {}
        self._running_mutex = threading.Lock()
        self._accepting = True
        # {id: spec with its password masked, or None} of the operations
        # this process created: what their records keep once finished.
        self._kept_specs = {}

    def drain(self, grace):
        """Take no more work, and let running operations finish for
        ``grace`` seconds; returns how many still run then."""
        # Under the mutex: a submit either made it to the pool before
        # this, and is cancelled or awaited below, or sees it and refuses.
        with self._running_mutex:
            self._accepting = False
        self._cancel_queued()
        with self._running_mutex:
            running = list(self._running.values())
        left = futures.wait(running, timeout=grace).not_done
        if left:
            LOG.warning('Stopping with %d operation(s) still running; they '
                        'resume when this conductor starts again', len(left))
        return len(left)

    def shutdown(self, wait):
        self._pool.shutdown(wait=wait, cancel_futures=True)

    def _cancel_queued(self):
        """End the operations still waiting for a worker: a stopping
        conductor starts no new work."""
        with self._running_mutex:
            queued = [(operation_id, cancelled) for operation_id, cancelled
                      in self._queued.items()
                      if self._running[operation_id].cancel()]
            for operation_id, _ in queued:
                del self._queued[operation_id]
                del self._running[operation_id]
        for _, cancelled in queued:
            cancelled()

    def _cancelled(self, operation_id, kind, name, before, resumed):
        """A resumed operation cancelled is handed back as it was; a new
        one has done nothing and fails saying so."""
        if not resumed:
            self._fail_unstarted(
                operation_id, kind, name, before,
                'conductor %s stopped before it began; nothing was '
                'changed: run it again' % self.host)
        self.locks.release(name)

    def free_workers(self):
        """How many more operations could start now."""
        with self._running_mutex:
            if not self._accepting:
                return 0
            return self.max_operations - len(self._running)

    def running(self):
        """The ids of the operations this conductor runs or queues."""
        with self._running_mutex:
            return sorted(self._running)

    def check_accepting(self):
        if not self._accepting:
            raise exceptions.ConductorBusy(
                host=self.host, reason='it is shutting down')

    @contextlib.contextmanager
    def start(self, name):
        """Begin submitting an operation of cluster ``name``: check that
        this conductor takes work and lock the cluster (ClusterBusy if
        another operation holds it). The lock is released if the block
        raises; once submitted, the operation releases it as it ends."""
        self.check_accepting()
        try:
            self.locks.acquire(name)
        except exceptions.ClusterBusy:
            raise self._busy(name) from None
        try:
            yield
        except BaseException:
            self.locks.release(name)
            raise

    def _busy(self, name):
        """ClusterBusy of cluster ``name``, naming the operation that
        runs on it if one is recorded yet."""
        running = self.db.list_operations(
            cluster=name, state=states.OPERATION_RUNNING)
        return exceptions.ClusterBusy(
            name=name, operation=running[-1] if running else None)

    def create(self, kind, name, spec=None):
        """Record a new operation of ``kind`` on cluster ``name``; a
        deploy's with the ``spec`` it applies."""
        operation_id = str(uuid.uuid4())
        self.db.create_operation(operation_id, name, kind, self.host, spec)
        self._kept_specs[operation_id] = db_models.mask_spec(spec)
        return operation_id

    def _finish(self, operation_id, state, error=None, result=None,
                event=None):
        """Record the operation's end and ``event`` (see Notifier.event)
        in one transaction, then send the event."""
        kept = {}
        if operation_id in self._kept_specs:
            kept['spec'] = self._kept_specs.pop(operation_id)
        self.db.finish_operation(operation_id, state, error, result,
                                 event=event, **kept)
        if event is None:
            return
        try:
            self.notifier.send(event)
        except Exception:
            # Recorded already; the bus only echoes the record.
            LOG.exception('Could not send %s of operation %s',
                          event['event_type'], operation_id)

    def interrupted(self, name):
        """The last operation a dead process left running, if any.

        Called with the cluster locked, so nothing else runs it now;
        older ones are closed as interrupted. With a jobboard, one that
        has a job there is not interrupted: a conductor runs it, or
        will (ClusterBusy).
        """
        running = self.db.list_operations(
            cluster=name, state=states.OPERATION_RUNNING)
        if running and self.board is not None:
            jobs = {job.details.get('operation') for job in self.board.jobs()}
            for operation in running:
                if operation.id in jobs:
                    raise exceptions.ClusterBusy(name=name,
                                                 operation=operation)
        for operation in running[:-1]:
            self.db.finish_operation(operation.id,
                                     states.OPERATION_INTERRUPTED)
        if not running:
            return None
        last = running[-1]
        if last.kind != 'deploy':
            self.db.finish_operation(last.id, states.OPERATION_INTERRUPTED)
            return None
        return last

    def pauser(self, operation_id, seconds):
        """A function that waits ``seconds``, or only until the end of
        the operation, if this process runs it (looked up now: it is
        forgotten as it ends). One that has ended waits the whole time.
        """
        with self._running_mutex:
            future = self._running.get(operation_id)

        def pause():
            if future is None or future.done():
                time.sleep(seconds)
            else:
                futures.wait([future], seconds)
        return pause

    def wait(self, operation_id):
        """The result of an operation this process runs, once finished.

        Returns {'operation', 'changed', 'resumed'} (a move's with
        'moved', how many nodes it moved); raises
        OperationFailed after its rollback, or the error that stopped it
        before its flow ran.
        """
        with self._running_mutex:
            future = self._running.get(operation_id)
        if future is None and self.board is not None:
            # Any conductor may run it: its record says when it ends.
            while self._is_running(operation_id):
                time.sleep(0.2)
        if future is None:
            return self._ended(operation_id)
        try:
            return future.result()
        except futures.CancelledError:
            operation = self.db.get_operation(operation_id)
            if operation.error:
                raise exceptions.OperationFailed(operation.error) from None
            # A resumed operation, handed back as it was.
            raise exceptions.OperationFailed(
                operation=operation.kind.capitalize(),
                cluster=operation.cluster,
                reason='conductor %s stopped before it could resume it; it '
                       'resumes when that conductor starts again'
                       % self.host) from None

    def _is_running(self, operation_id):
        operation = self.db.get_operation(operation_id)
        return (operation is not None
                and operation.state == states.OPERATION_RUNNING)

    def _ended(self, operation_id):
        """What wait gives of an operation that has ended already."""
        operation = self.db.get_operation(operation_id)
        if operation is None or operation.state == states.OPERATION_RUNNING:
            # Unknown, or another process runs it.
            raise exceptions.OperationNotFound(id=operation_id)
        if operation.state != states.OPERATION_SUCCEEDED:
            # The same error as the running operation's wait raised.
            raise exceptions.OperationFailed(operation.error or (
                'operation %s ended %s' % (operation_id, operation.state)),
                failed_tasks=(operation.result or {}).get(
                    'failed_tasks', []))
        return dict(operation.result or {}, operation=operation_id)

    def resume_interrupted(self, resume, which=None):
        """Submit ``resume`` for what this conductor was running when it
        last stopped and no process runs now (its cluster's lock is
        free, and it has no job on the jobboard); ``which(operation)``:
        only those it accepts. Returns the ids of those submitted."""
        submitted = []
        # With a jobboard, one whose job is there is another's to claim.
        posted = set() if self.board is None else {
            job.details.get('operation') for job in self.board.jobs()}
        for operation in self.db.list_operations(
                state=states.OPERATION_RUNNING, conductor=self.host):
            if operation.id in posted or (
                    which is not None and not which(operation)):
                continue
            try:
                self.locks.acquire(operation.cluster)
            except exceptions.ClusterBusy:
                continue
            if self.db.get_operation(operation.id).state != \
                    states.OPERATION_RUNNING:
                # Ended by its process since it was listed.
                self.locks.release(operation.cluster)
                continue
            LOG.info('Resuming %s %s of cluster %s', operation.kind,
                     operation.id, operation.cluster)
            cluster = self.db.get_cluster(operation.cluster)
            try:
                submitted.append(self.submit(
                    operation.id, operation.kind, operation.cluster,
                    None if cluster is None else cluster.state, True,
                    resume))
            except exceptions.ConductorBusy:
                self.locks.release(operation.cluster)
                break
        return submitted

    def submit(self, operation_id, kind, name, before, resumed, run, *args,
               **local):
        """Run ``run(operation_id, *args, on_progress, **local)`` in the
        pool; the cluster's lock is released when it ends. ``before``:
        the state the cluster had, for the failure message (None: this
        submit recorded the cluster). ``local``: what the submit read
        that spares the run reading it again.

        With a jobboard, post it as a job instead, ``args`` with it
        (they must be JSON; ``local`` is not), and release the cluster's
        lock: the conductor that claims the job runs it (see
        run_claimed).

        Raises ConductorBusy if the conductor is stopping or the start
        cannot be announced; the operation then ends failed, and a
        cluster this submit recorded is forgotten (a resumed operation
        is handed back as it was). The caller releases the lock.
        """
        try:
            if not resumed:
                self.notifier.emit('tenks.cluster.%s.start' % kind, name,
                                   {'operation': operation_id})
            if self.board is not None:
                self.check_accepting()
                self.board.post(operation_id, kind, name, before, args)
                self.locks.release(name)
                return operation_id
            with self._running_mutex:
                self.check_accepting()
                future = self._pool.submit(
                    self._execute, operation_id, kind, name, before,
                    resumed, functools.partial(self.locks.release, name),
                    functools.partial(run, **local), *args)
                self._running[operation_id] = future
                self._queued[operation_id] = functools.partial(
                    self._cancelled, operation_id, kind, name, before,
                    resumed)
        except Exception as e:
            if isinstance(e, (exceptions.ConductorBusy, RuntimeError)):
                # RuntimeError: the pool was shut down.
                reason = 'it is shutting down'
            else:
                LOG.exception('Could not start operation %s', operation_id)
                reason = 'it could not announce operation %s (%s: %s)' % (
                    operation_id, type(e).__name__, e)
            if not resumed:
                self._fail_unstarted(
                    operation_id, kind, name, before,
                    'conductor %s did not start it: %s; nothing was '
                    'changed' % (self.host, reason))
            raise exceptions.ConductorBusy(host=self.host,
                                           reason=reason) from e
        return operation_id

    def run_claimed(self, operation_id, kind, name, before, resumed, run,
                    ended, handed_back):
        """Run ``run(operation_id, on_progress)``, an operation whose job
        this conductor claimed; ``ended()`` once its end is recorded,
        ``handed_back()`` if the conductor stops before it begins.
        ConductorBusy if the conductor is stopping."""
        with self._running_mutex:
            self.check_accepting()
            self._running[operation_id] = self._pool.submit(
                self._execute, operation_id, kind, name, before, resumed,
                ended, run)
            self._queued[operation_id] = handed_back

    def _execute(self, operation_id, kind, name, before, resumed, ended,
                 run, *args):
        with self._running_mutex:
            self._queued.pop(operation_id, None)
        recorder = progress.ProgressRecorder(self.db, operation_id)
        # The end is recorded before the cluster's lock and the waiter
        # go: whoever then starts an operation on the cluster or asks
        # for this one finds it ended, not running.
        try:
            try:
                outcome = run(operation_id, *args, on_progress=recorder)
            finally:
                recorder.flush()
            result = {'changed': outcome.changed, 'resumed': resumed,
                      'warnings': outcome.warnings}
            if outcome.plan is not None:
                result['plan'] = outcome.plan
            if kind == 'move':
                # What "tenks hypervisor maintenance" reports.
                result['moved'] = outcome.moved
            for warning in outcome.warnings:
                LOG.warning('Cluster %s: %s', name, warning)
            self._finish(operation_id, states.OPERATION_SUCCEEDED,
                         result=result, event=self.notifier.event(
                             'tenks.cluster.%s.end' % kind, name,
                             {'operation': operation_id,
                              'changed': len(outcome.changed)}))
            return dict(result, operation=operation_id)
        except exceptions.OperationFailed as e:
            # The flow ran, and was rolled back.
            error = exceptions.OperationFailed(
                operation=kind.capitalize(), cluster=name,
                reason='%s%s' % (e, self._after_failure(
                    kind, name, before, operation_id)),
                failed_tasks=e.kwargs.get('failed_tasks', []))
            self._fail(operation_id, kind, name, error)
            raise error from None
        except Exception as e:
            # Stopped before its flow ran, or loading the flow failed.
            LOG.debug('Operation %s failed', operation_id, exc_info=True)
            self._fail(operation_id, kind, name, exceptions.OperationFailed(
                operation=kind.capitalize(), cluster=name,
                reason=str(e) or type(e).__name__))
            raise
        finally:
            ended()
            with self._running_mutex:
                self._running.pop(operation_id, None)

    def _fail_unstarted(self, operation_id, kind, name, before, reason):
        """End an operation that never began; forget the cluster its
        submit recorded (``before`` None), which nothing was made for."""
        if before is None:
            self.db.delete_cluster(name)
        self._fail(operation_id, kind, name, exceptions.OperationFailed(
            operation=kind.capitalize(), cluster=name, reason=reason))

    def _fail(self, operation_id, kind, name, error):
        # The tasks that failed outlive its flow (``tenks operation
        # graph`` marks them once the flow is pruned).
        failed = error.kwargs.get('failed_tasks')
        self._finish(operation_id, states.OPERATION_FAILED, str(error),
                     result={'failed_tasks': failed} if failed else None,
                     event=self.notifier.event(
                         'tenks.cluster.%s.error' % kind, name,
                         {'operation': operation_id, 'error': str(error)},
                         error=True))

    def _after_failure(self, kind, name, before, operation_id):
        """What a failed operation left: the end of its error."""
        if self.db.get_cluster(name) is None:
            return '. Everything this %s created was rolled back' % kind
        if kind == 'teardown':
            left = len(self.db.list_resources(name))
            return ('. %d resource(s) remain recorded: run the teardown '
                    'again to finish it' % left)
        plan = self.db.get_operation(operation_id).plan
        if kind == 'move':
            return ('. Nodes whose move failed were rolled back to their '
                    'old hypervisor, those moved stay at their new one: %s'
                    % '; '.join(moved_nodes(self.db, plan)))
        removed = removed_things(self.db, plan)
        whole = self.db.get_cluster(name).state == states.CLUSTER_DEPLOYED
        kept = self.db.list_resources(name, operation=operation_id)
        if kept:
            return ('. %d resource(s) this deploy created could not be '
                    'removed (%s); they stay recorded with their nodes%s: '
                    'run the deploy again, or "tenks teardown %s", to '
                    'finish' % (len(kept), ', '.join(
                        '%s %s' % (r.kind, r.name) for r in kept),
                        _not_undone(removed), name))
        if before == states.CLUSTER_DEPLOYED and whole and not removed:
            return ('. What this deploy created was rolled back; the '
                    'cluster deployed before is kept')
        if before == states.CLUSTER_DEPLOYED:
            return ('. What this deploy created was rolled back%s; cluster '
                    '%s now has %s: run the deploy again to finish' % (
                        _not_undone(removed), name, where_nodes_are(
                            self.db.list_nodes(cluster=name))))
        return ('. What this deploy created was rolled back%s; cluster %s '
                'was not deployed before and stays recorded as failed with '
                '%d resource(s) of earlier operations: run the deploy again, '
                'or "tenks teardown %s"' % (
                    _not_undone(removed), name,
                    len(self.db.list_resources(name)), name))


def removed_things(db, plan):
    """What a deploy's ``plan`` removed, as its failure left it (removals
    run last and are not undone): ['node tk2', 'bridge br1 on hv1',
    'nova_flavor f1', ...]."""
    names = {entry['uuid']: entry['name'] for entry in plan['nodes']}
    gone = ['node %s' % entry['name'] for entry in plan['nodes']
            if entry['new'] is None and db.get_node(entry['uuid']) is None]
    left = {(r.kind, r.name) for r in db.list_resources(plan['cluster'])}
    gone += ['%s %s on %s' % (row['kind'], row['name'], row['hypervisor'])
             for row in plan['host_remove']
             if not db.get_resource(row['hypervisor'], row['kind'],
                                    row['name'])]
    gone += ['nova_flavor %s' % flavor
             for flavor in plan['flavors']['remove']
             if ('nova_flavor', flavor) not in left]
    gone += ['the Ironic node of %s' % names[uuid]
             for uuid in plan['unenrol'] if ('ironic_node', uuid) not in left]
    return gone


def _not_undone(removed):
    if not removed:
        return ''
    return ', not what it removed (%s)' % ', '.join(removed)


def where_nodes_are(nodes):
    """'3 node(s) (hv1: tk0, tk2 (failed); hv2: tk1)' of node records."""
    by_host = {}
    for node in nodes:
        by_host.setdefault(node.hypervisor, []).append(
            node.name + (' (failed)' if node.state == states.NODE_FAILED
                         else ''))
    return '%d node(s) (%s)' % (len(nodes), '; '.join(
        '%s: %s' % (host, ', '.join(sorted(names)))
        for host, names in sorted(by_host.items())))


def moved_nodes(db, plan):
    """Where each node of a move ``plan`` is, as its failure left it:
    ['tk0 moved to hv2', 'tk1 stays on hv1']."""
    where = []
    for move in plan['moves']:
        host = db.get_node(move['uuid']).hypervisor
        if host == move['target']:
            where.append('%s moved to %s' % (move['name'], host))
        elif host == move['source']:
            where.append('%s stays on %s' % (move['name'], host))
        else:
            where.append('%s is on %s' % (move['name'], host))
    return where
