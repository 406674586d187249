"""The bus locked down as README's Security section ("The bus") says, on
the real RabbitMQ: a vhost of its own, a user per service with exactly the
permissions of the README's rabbitmqctl commands. Tenks works with them,
and each user is refused what is not its service's.

The users are named after the test's token and deleted with its vhost.
"""

import contextlib
import os
import re
import secrets
import shlex
import subprocess
import time

import amqp
import kombu
import pytest

from tenks import notifier
from tenks import policy
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df

ADMIN = policy.admin_context()

pytestmark = pytest.mark.functional

README = os.path.join(os.path.dirname(__file__), '..', '..', 'README.md')
# The README's names: its vhost, users and hypervisor.
VHOST, CONDUCTOR, HOSTAGENT, CLIENT, HOST = (
    'tenks', 'tenks-conductor', 'tenks-hv1', 'tenks-client', 'hv1')


def readme_grants():
    """The README's set_permissions and set_topic_permissions commands,
    split into arguments (after ``rabbitmqctl``)."""
    with open(README) as f:
        text = f.read()
    section = text.split('\n### The bus\n')[1]
    block = section.split('```sh\n')[1].split('```')[0]
    commands = [shlex.split(line, comments=True) for line in block.replace(
        '\\\n', ' ').splitlines()]
    grants = [args[1:] for args in commands
              if args[1] in ('set_permissions', 'set_topic_permissions')]
    assert {args[3] for args in grants} == {CONDUCTOR, HOSTAGENT, CLIENT}
    assert {args[2] for args in grants} == {VHOST}
    return grants


class LockedDown(df.Deployment):
    """A distributed Tenks whose services and client each connect as a
    user of their own, with the README's permissions."""

    def __init__(self, tmp_path):
        self.users = {}  # service host name -> (user, password)
        super().__init__(tmp_path)
        self.client = 'client-%s' % self.token
        self.url = self.user_url(self.client)

    def user(self, host):
        if host not in self.users:
            self.users[host] = ('tenks-t-%s' % host, secrets.token_hex(8))
        return self.users[host]

    def user_url(self, host):
        return 'rabbit://%s:%s@127.0.0.1:5672/%s' % (*self.user(host),
                                                     self.vhost)

    def service_url(self, host):
        return self.user_url(host)

    def grant(self):
        for user, password in self.users.values():
            df.rabbitmqctl('add_user', user, password)
        readme = {CONDUCTOR: [self.conductor_host], CLIENT: [self.client],
                  HOSTAGENT: self.hosts}
        for command, _, _, user, *regexes in readme_grants():
            for host in readme[user]:
                # A hypervisor's user names its host in its regexes.
                mine = [regex.replace(HOST, re.escape(host))
                        if user == HOSTAGENT else regex
                        for regex in regexes]
                df.rabbitmqctl(command, '-p', self.vhost,
                               self.user(host)[0], *mine)

    def __enter__(self):
        try:
            return super().__enter__()
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc):
        try:
            super().__exit__(*exc)
        finally:
            for user, _ in self.users.values():
                with contextlib.suppress(subprocess.CalledProcessError):
                    df.rabbitmqctl('delete_user', user)


def refused(deployment, host, action):
    """Whether the broker refuses ``action(channel)`` to the user of
    ``host``; a publish is followed by a round trip, which a refusal
    (sent back asynchronously) closes the channel before."""
    user, password = deployment.user(host)
    with kombu.Connection('amqp://%s:%s@127.0.0.1:5672/%s' % (
            user, password, deployment.vhost)) as conn:
        channel = conn.channel()
        try:
            action(channel)
            channel.basic_qos(0, 1, False)
        except amqp.exceptions.AccessRefused:
            return True
    return False


def consume(queue):
    return lambda channel: channel.basic_consume(queue,
                                                 callback=lambda m: None)


def publish(routing_key):
    return lambda channel: channel.basic_publish(
        amqp.Message('{}'), exchange='tenks', routing_key=routing_key)


def bind(queue, routing_key):
    def action(channel):
        channel.queue_declare(queue, auto_delete=False)
        channel.queue_bind(queue, 'tenks', routing_key)
    return action


class Events:

    def __init__(self, cluster):
        self.cluster = cluster
        self.types = []

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        if payload.get('cluster') == self.cluster:
            self.types.append(event_type)


def test_each_service_works_with_the_readme_permissions_and_no_more(
        tmp_path):
    with LockedDown(tmp_path / 'deployment') as d:
        # Up: registered, and answered the conductor's check.
        env = cf.ClusterEnv(tmp_path, port_base=7700,
                            state_dirs=d.state_dirs.values())
        try:
            _deploy_and_refuse(d, env)
        finally:
            left = env.leftovers()
            env.force_clean()
        assert left == [], 'the test left %s behind' % left


def _deploy_and_refuse(d, env):
    events = Events(env.cluster)
    listener = notifier.listener(d.bus, events,
                                 pool='tenks-cli-%s' % d.token)
    listener.start()
    try:
        operation = d.wait(d.api.deploy_cluster(ADMIN, env.spec(count=2)))
        assert operation['state'] == 'succeeded', operation['error']
        operation = d.wait(d.api.teardown_cluster(ADMIN, env.cluster))
        assert operation['state'] == 'succeeded', operation['error']
        deadline = time.monotonic() + 10
        while (len(events.types) < 8 and time.monotonic() < deadline):
            time.sleep(0.1)
    finally:
        listener.stop()
        listener.wait()
    assert events.types[0] == 'tenks.cluster.deploy.start'
    assert events.types[-1] == 'tenks.cluster.teardown.end'

    hva, hvb = d.hosts
    conductor = 'tenks-conductor.%s' % d.conductor_host
    # A hypervisor's user: no other service's requests, none to send.
    for queue in ('tenks-conductor', conductor, 'tenks-hostagent.' + hvb):
        assert refused(d, hva, consume(queue)), queue
    assert refused(d, hva, bind('tenks-hostagent.' + hva,
                                'tenks-hostagent.' + hvb))
    assert refused(d, hva, publish('tenks-hostagent.' + hvb))
    assert not refused(d, hva, publish('tenks-conductor'))
    # The client's: calls to the conductors, and notifications.
    assert refused(d, d.client, consume('tenks-conductor'))
    assert refused(d, d.client, publish('tenks-hostagent.' + hva))
    assert refused(d, d.client, bind('tenks-cli-x', 'tenks-conductor'))
    # The conductor's: no hostagent's requests.
    assert refused(d, d.conductor_host, consume('tenks-hostagent.' + hva))
