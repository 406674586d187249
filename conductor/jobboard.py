"""What several conductors share on one server ([conductor] jobboard_url).

A TaskFlow jobboard holds their operations as jobs: the conductor that
accepts an operation posts it, one running conductor claims and runs it,
and its claim lasts only while that conductor renews it (Redis: an
expiring owner key; ZooKeeper: an ephemeral node of its session), so a
dead conductor's jobs come free for the others. tooz, on the same server,
gives them locks and a group of the live conductors.

Libraries load only when a jobboard is configured: the embedded default
needs none of them.
"""

import collections
import urllib.parse

from oslo_log import log as logging

from tenks import exceptions

LOG = logging.getLogger(__name__)

DEFAULT_NAMESPACE = 'tenks'
# Seconds a call to the server may take before it counts as failed.
SOCKET_TIMEOUT = 5

# kind: 'redis' or 'zookeeper'; board: TaskFlow's jobboard conf; tooz: the
# coordination URL; namespace: what separates these conductors' keys.
Backend = collections.namedtuple('Backend',
                                 'kind board tooz namespace url')


def backend(url, expiry):
    """The Backend of a jobboard ``url`` whose claims and locks last
    ``expiry`` seconds unless renewed; ConfigInvalid if it is not one."""
    parsed = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parsed.query))

    def invalid(reason):
        return exceptions.ConfigError(
            reason='[conductor] jobboard_url %s: %s' % (_masked(parsed),
                                                        reason))

    if parsed.scheme == 'redis':
        try:
            port = parsed.port or 6379
            db = int(parsed.path.strip('/') or 0)
        except ValueError:
            raise invalid('the port and the database must be numbers') \
                from None
        namespace = query.get('namespace', DEFAULT_NAMESPACE)
        board = {'board': 'redis', 'host': parsed.hostname or '127.0.0.1',
                 'port': port, 'db': db, 'namespace': namespace + '.jobs',
                 'socket_timeout': SOCKET_TIMEOUT,
                 'socket_connect_timeout': SOCKET_TIMEOUT}
        tooz = {'db': db, 'namespace': namespace + '.tooz',
                'timeout': expiry, 'socket_timeout': SOCKET_TIMEOUT}
        password = urllib.parse.unquote(parsed.password or '')
        if password:
            board['password'] = password
        tooz_url = 'redis://%s%s:%d?%s' % (
            ':%s@' % urllib.parse.quote(password, safe='')
            if password else '', board['host'], port,
            urllib.parse.urlencode(tooz))
        return Backend('redis', board, tooz_url, namespace,
                       _masked(parsed))
    if parsed.scheme == 'zookeeper':
        if not parsed.netloc:
            raise invalid('it names no server (zookeeper://HOST:PORT)')
        namespace = parsed.path.strip('/') or DEFAULT_NAMESPACE
        board = {'board': 'zookeeper', 'hosts': parsed.netloc,
                 'path': '/%s/jobs' % namespace, 'timeout': expiry}
        tooz_url = 'zookeeper://%s?%s' % (
            parsed.netloc, urllib.parse.urlencode(
                {'namespace': '%s/tooz' % namespace, 'timeout': expiry}))
        return Backend('zookeeper', board, tooz_url, namespace,
                       _masked(parsed))
    raise invalid('use redis://HOST:PORT or zookeeper://HOST:PORT')


def _masked(parsed):
    """The URL without its password, for errors and logs."""
    if not parsed.password:
        return parsed.geturl()
    return parsed._replace(netloc=parsed.netloc.replace(
        ':%s@' % parsed.password, ':***@')).geturl()


class Board:
    """The jobboard as one conductor (``host``) uses it. Every job is one
    operation: its details are {'operation', 'kind', 'cluster', 'before',
    'args'}."""

    def __init__(self, backend, host, expiry):
        from taskflow.jobs import backends
        self.backend = backend
        self.host = host
        self.expiry = expiry
        self._board = backends.fetch('tenks', dict(backend.board))

    def connect(self):
        """JobboardError if its server does not answer."""
        try:
            self._board.connect()
        except Exception as e:
            raise exceptions.JobboardError(
                url=self.backend.url, reason='does not answer: %s' % (
                    str(e).splitlines()[0] or type(e).__name__)) from e

    def close(self):
        self._board.close()

    def post(self, operation_id, kind, cluster, before, args):
        self._board.post('%s:%s' % (kind, cluster), details={
            'operation': operation_id, 'kind': kind, 'cluster': cluster,
            'before': before, 'args': list(args)})

    def jobs(self, only_unclaimed=False):
        return list(self._board.iterjobs(only_unclaimed=only_unclaimed,
                                         ensure_fresh=True))

    def find(self, operation_id):
        """The job of ``operation_id``, or None."""
        for job in self.jobs():
            if job.details.get('operation') == operation_id:
                return job
        return None

    def owner(self, job):
        """Who holds ``job``, or None (TaskFlow's Redis board cannot
        read an owner that is not there)."""
        from taskflow import states
        if job.state != states.CLAIMED:
            return None
        return self._board.find_owner(job)

    def claim(self, job):
        """Claim ``job`` for this conductor; False if another has."""
        from taskflow import exceptions as tf_exceptions
        kwargs = {'expiry': self.expiry} if self.backend.kind == 'redis' \
            else {}
        try:
            self._board.claim(job, self.host, **kwargs)
        except (tf_exceptions.UnclaimableJob, tf_exceptions.NotFound):
            return False
        return True

    def renew(self, job):
        """Keep this conductor's claim of ``job``; False if it is lost.
        A ZooKeeper claim lasts as long as the session, which the client
        keeps alive itself."""
        if self.backend.kind != 'redis':
            return self.owner(job) == self.host
        return self.owner(job) == self.host and job.extend_expiry(
            self.expiry)

    def consume(self, job):
        self._board.consume(job, self.host)

    def abandon(self, job):
        self._board.abandon(job, self.host)


class Coordination:
    """tooz on the jobboard's server: locks, and the group of the live
    conductors, each with what it says of itself (its capabilities)."""

    GROUP = b'conductors'

    def __init__(self, backend, host):
        from tooz import coordination
        self._coordinator = coordination.get_coordinator(
            backend.tooz, host.encode())
        self.namespace = backend.namespace

    def start(self, capabilities):
        from tooz import coordination
        self._coordinator.start()
        try:
            self._coordinator.create_group(self.GROUP).get()
        except coordination.GroupAlreadyExist:
            pass
        try:
            self._coordinator.join_group(self.GROUP, capabilities).get()
        except coordination.MemberAlreadyExist:
            # This conductor's name, left by its killed predecessor until
            # another member lists the group: it is this one now.
            self._coordinator.leave_group(self.GROUP).get()
            self._coordinator.join_group(self.GROUP, capabilities).get()

    def stop(self):
        from tooz import coordination
        try:
            self._coordinator.leave_group(self.GROUP).get()
        except coordination.ToozError as e:
            LOG.warning('Could not leave the group of conductors: %s', e)
        self._coordinator.stop()

    def heartbeat(self, capabilities):
        """Keep this conductor's membership and locks, saying
        ``capabilities`` of itself."""
        self._coordinator.heartbeat()
        self._coordinator.update_capabilities(self.GROUP,
                                              capabilities).get()

    def lock(self, name):
        return self._coordinator.get_lock(
            ('%s.%s' % (self.namespace, name)).encode())

    def members(self):
        """What each live conductor says of itself."""
        members = self._coordinator.get_members(self.GROUP).get()
        found = [(member, self._coordinator.get_member_capabilities(
            self.GROUP, member)) for member in members]
        return [request.get() for _, request in found]
