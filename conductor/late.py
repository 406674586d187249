"""Answers that come after their waiter gave up.

A request the conductor stopped waiting for may still run: its agent
began it before its deadline, and answers when it is done. The task
that sent it has moved on (failed, reverted), so the answer no longer
reaches it; what the answer does to the record was kept in the state
database when the task gave up (``tenks_unanswered_requests``, one row
per thing the request acts on), and is applied whenever the answer
comes, by whichever conductor it reaches: a thing made is recorded
'present' (credited to the request's operation if the agent created
it), a thing removed loses its record, and a node left with nothing
recorded is forgotten and, if it had been announced, its
``tenks.node.delete.end`` sent.

It is applied once (the rows are claimed in the transaction that applies
them), and not at all once a later request on the same things has begun
(StateDB.begin_resources forgets the rows): that request's answer
decides.
"""

from oslo_log import log as logging

from tenks import exceptions
from tenks import notifier
from tenks import states

LOG = logging.getLogger(__name__)


class LateResults:

    def __init__(self, db, notifier):
        self.db = db
        self.notifier = notifier

    def remember(self, request_id, host, operation, late):
        """Keep what the answer to ``request_id`` on ``host`` does to
        the record (``late``: see flows.base.late_ensure)."""
        self.db.add_unanswered(request_id, host, operation, late['cluster'],
                               late['effects'])

    def forget(self, request_id):
        """The answer came in time after all."""
        self.db.forget_unanswered(request_id)

    def apply(self, request_id, host, result=None, error=None):
        """Apply an answer nobody waits for, if one was awaited."""
        conflict = error is not None and error.get('type') == (
            exceptions.ResourceConflict.__name__)
        if error is None:
            forgotten = self.db.settle_unanswered(
                request_id, True, created=result.get('created', ()),
                removed=result.get('removed', ()))
        else:
            forgotten = self.db.settle_unanswered(request_id, False,
                                                  conflict=conflict)
        if forgotten is None:
            # A copy of an answer received already, or one superseded.
            LOG.debug('Dropping result of request %s from %s: no waiter',
                      request_id, host)
            return
        LOG.info('Request %s answered by %s after its conductor gave up '
                 'waiting (%s); its record follows the answer%s',
                 request_id, host,
                 'error: %s' % error.get('message') if error else 'done',
                 ''.join('; node %s forgotten' % node.name
                         for node in forgotten))
        for node in forgotten:
            if node.state == states.NODE_DEPLOYED:
                self.notifier.emit('tenks.node.delete.end', node.cluster,
                                   notifier.node_payload(node))
