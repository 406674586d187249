"""A RabbitMQ node of a test's own, to stop and start under a deployment.

The RabbitMQ of the machine (rabbit@localhost, port 5672) serves every
other test; stopping it would break theirs. A private node runs the same
server from the same installation, as the rabbitmq user, under a node
name, ports and directories of its own: ``rabbitmqctl stop_app`` on it
closes every connection and drops every queue and message that is not
durable (none of Tenks' is), as a broker restart does, and
``start_app`` brings it back with its users, vhosts and permissions.
"""

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time

from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df

SERVER = '/usr/lib/rabbitmq/bin/rabbitmq-server'
USER = 'rabbitmq'


class PrivateBroker(df.Broker):
    """A RabbitMQ node started when the block begins, stopped and
    removed when it ends."""

    def __init__(self, start_timeout=120):
        token = secrets.token_hex(3)
        super().__init__('tenks-bus-%s@localhost' % token,
                         cf.free_tcp_port())
        self.start_timeout = start_timeout
        self.directory = None
        self.process = None

    def __enter__(self):
        # Not under pytest's tmp_path: its parents are closed to the
        # rabbitmq user.
        self.directory = tempfile.mkdtemp(prefix='tenks-rabbitmq-')
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self):
        account = pwd.getpwnam(USER)
        plugins = os.path.join(self.directory, 'enabled_plugins')
        env_file = os.path.join(self.directory, 'rabbitmq-env.conf')
        with open(plugins, 'w') as f:
            f.write('[].\n')
        # Not the machine's rabbitmq-env.conf: it names the shared node.
        open(env_file, 'w').close()
        for path in (self.directory, plugins, env_file):
            os.chown(path, account.pw_uid, account.pw_gid)
        environ = dict(
            os.environ, ERL_EPMD_ADDRESS='127.0.0.1',
            RABBITMQ_CONF_ENV_FILE=env_file,
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_IP_ADDRESS='127.0.0.1',
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(cf.free_tcp_port()),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=(
                '-kernel inet_dist_use_interface {127,0,0,1}'),
            RABBITMQ_MNESIA_BASE=os.path.join(self.directory, 'mnesia'),
            RABBITMQ_LOG_BASE=os.path.join(self.directory, 'log'),
            RABBITMQ_PID_FILE=os.path.join(self.directory, 'pid'),
            RABBITMQ_ENABLED_PLUGINS_FILE=plugins)
        with open(os.path.join(self.directory, 'server.out'), 'wb') as out:
            self.process = subprocess.Popen(
                ['runuser', '-u', USER, '--', SERVER], env=environ,
                stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=self.directory)
        self.await_startup()

    def await_startup(self):
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                self.ctl('await_startup', '--timeout', '10')
                return
            except subprocess.CalledProcessError as e:
                if (self.process.poll() is not None
                        or time.monotonic() > deadline):
                    raise AssertionError(
                        'RabbitMQ node %s did not start (%s); see %s' % (
                            self.node, e.stderr.strip(),
                            self.directory)) from None
            time.sleep(0.5)

    @contextlib.contextmanager
    def down(self):
        """Stop the broker (its node stays up) for the block; always
        start it again."""
        self.ctl('stop_app')
        try:
            yield
        finally:
            self.ctl('start_app')
            self.await_startup()

    def __exit__(self, *exc):
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(subprocess.CalledProcessError,
                                     subprocess.TimeoutExpired):
                self.ctl('stop')
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
