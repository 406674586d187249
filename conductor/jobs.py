"""A conductor's part in the work of several: it claims the jobs on the
jobboard while it has free workers, runs them, renews its claims and its
membership, and gives back what it claimed but did not begin when it
stops.

A job's operation is resumed from its persisted flow when one was saved
(its first conductor died: requests are asked again with the same ids,
and the hostagents' kept results answer), else started from its checks.
"""

import datetime
import functools
import math
import threading
import time

from oslo_log import log as logging

from tenks import exceptions
from tenks import states

LOG = logging.getLogger(__name__)

# Seconds between two looks at the jobboard for jobs to claim.
POLL_INTERVAL = 0.5


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class JobRunner:

    def __init__(self, conductor, board, coordination):
        self.conductor = conductor
        self.db = conductor.db
        self.operations = conductor.operations
        self.board = board
        self.coordination = coordination
        self.renew_interval = board.expiry / 3.0
        self._held = {}
        self._held_mutex = threading.Lock()
        self._stopping = threading.Event()
        self._thread = None
        self._trouble = None

    def capabilities(self):
        """What this conductor says of itself to the others."""
        return {'host': self.conductor.host,
                'started_at': self.conductor.started_at.isoformat(),
                'heartbeat_at': _now(),
                'jobs': self.operations.running()}

    def start(self):
        # The board first: tooz tries a server that does not answer for
        # a minute.
        self.board.connect()
        self.coordination.start(self.capabilities())
        self._thread = threading.Thread(target=self._loop, name='jobs',
                                        daemon=True)
        self._thread.start()

    def stop(self):
        """Claim no more."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def close(self):
        """Leave the group of conductors and the board: not while
        operations still run, whose claims must last as long as they."""
        self.board.close()
        self.coordination.stop()

    def _loop(self):
        renewed = 0.0
        while not self._stopping.is_set():
            try:
                # At once after an outage: before another conductor
                # claims a job whose claim expired meanwhile.
                if self._trouble is not None or (
                        time.monotonic() - renewed >= self.renew_interval):
                    self._renew()
                    renewed = time.monotonic()
                self._claim()
            except Exception as e:
                self._troubled(e)
            else:
                if self._trouble is not None:
                    LOG.info('The jobboard answers again')
                    self._trouble = None
            self._stopping.wait(POLL_INTERVAL)

    def _troubled(self, error):
        """Say once per outage that the jobboard does not answer."""
        if self._trouble is None:
            LOG.warning('The jobboard or its locks do not answer: %s: %s; '
                        'trying again', type(error).__name__, error)
        self._trouble = error

    def _renew(self):
        with self._held_mutex:
            held = dict(self._held)
        for operation_id, job in held.items():
            if self.board.renew(job) or not self._holds(operation_id):
                # Renewed, or consumed meanwhile: its operation ended.
                continue
            # Expired (the server was away longer than the claim lasts):
            # claimed again if no other conductor has yet.
            if self.board.claim(job):
                LOG.warning('Claimed the job of operation %s again: its '
                            'claim had expired', operation_id)
            else:
                LOG.error('Lost the claim of the job of operation %s to '
                          'conductor %s, which may run it too',
                          operation_id, self.board.owner(job))
        self.coordination.heartbeat(self.capabilities())

    def _claim(self):
        free = self.operations.free_workers()
        if free <= 0:
            return
        jobs = list(self.board.jobs(only_unclaimed=True))
        if not jobs:
            return
        # No more than a fair share at a look: jobs posted at once would
        # otherwise all go to the conductor that looks first, while the
        # others idle. What is left waits for the next look, of any.
        free = min(free, math.ceil(len(jobs) / max(1, len(self.members()))))
        for job in jobs:
            if free <= 0 or self._stopping.is_set():
                return
            if self.board.claim(job):
                if self._take_or_abandon(job):
                    free -= 1

    def _take_or_abandon(self, job):
        try:
            return self._take(job)
        except Exception:
            # Free for another try (a ZooKeeper claim would otherwise
            # last as long as this conductor).
            try:
                self.board.abandon(job)
            except Exception as e:
                LOG.warning('Could not give job %s back: %s', job.uuid, e)
            raise

    def _take(self, job):
        """Run the operation of a job just claimed; whether it runs."""
        details = job.details
        operation_id = details['operation']
        operation = self.db.get_operation(operation_id)
        if operation is None or operation.state != \
                states.OPERATION_RUNNING:
            # Its conductor recorded its end and died before consuming
            # the job.
            self.board.consume(job)
            return False
        resumed = self.conductor.runner.has_flow(operation_id)
        if operation.conductor != self.conductor.host:
            if resumed:
                LOG.info('Taking over %s %s of cluster %s from conductor '
                         '%s', operation.kind, operation_id,
                         operation.cluster, operation.conductor)
            self.db.set_operation_conductor(operation_id,
                                            self.conductor.host)
        with self._held_mutex:
            self._held[operation_id] = job
        run = functools.partial(self._run, details['kind'],
                                tuple(details['args']))
        try:
            self.operations.run_claimed(
                operation_id, details['kind'], details['cluster'],
                details['before'], resumed, run,
                functools.partial(self._ended, operation_id),
                functools.partial(self._hand_back, operation_id))
        except exceptions.ConductorBusy:
            self._hand_back(operation_id)
            return False
        return True

    def _run(self, kind, args, operation_id, on_progress=None):
        """Resume the operation's saved flow, or start it from its
        checks with the ``args`` its submit gave."""
        rooms = {'deploy': self.conductor.deployments,
                 'teardown': self.conductor.teardowns,
                 'move': self.conductor.maintenance}
        start = functools.partial(rooms[kind].run, operation_id, *args,
                                  on_progress=on_progress)
        return self.conductor.resume(operation_id, on_progress, start=start)

    def _holds(self, operation_id):
        with self._held_mutex:
            return operation_id in self._held

    def _release(self, operation_id):
        with self._held_mutex:
            return self._held.pop(operation_id)

    def _ended(self, operation_id):
        """Consume the job of an operation whose end is recorded."""
        job = self._release(operation_id)
        try:
            self.board.consume(job)
        except Exception as e:
            # Its record says it ended: whoever claims the job next only
            # consumes it (see _take).
            LOG.warning('Could not consume the job of operation %s: %s',
                        operation_id, e)

    def _hand_back(self, operation_id):
        """Give the job of an operation not begun back to the board."""
        job = self._release(operation_id)
        try:
            self.board.abandon(job)
        except Exception as e:
            LOG.warning('Could not give the job of operation %s back: %s; '
                        'its claim expires', operation_id, e)

    def members(self):
        """The live conductors, as each says of itself."""
        return self.coordination.members()
