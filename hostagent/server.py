"""The hostagent process: serves requests for one hypervisor.

It registers with the conductors when it starts, and again every
heartbeat_interval seconds with its current facts: that is its
heartbeat.
"""

import threading

from oslo_log import log as logging

from conductor import rpcapi as conductor_rpcapi
from hostagent import manager
from tenks import fileutils
from tenks import rpc
from tenks import runtime

LOG = logging.getLogger(__name__)


class HostAgent:

    def __init__(self, conf, bus):
        self.conf = conf
        # Before any driver makes its files there: they hold secrets.
        fileutils.private_dir(conf.state_dir)
        self.manager = manager.HostAgentManager(conf, bus)
        self.conductors = conductor_rpcapi.ConductorAPI(bus)
        self.server = bus.get_server(rpc.HOSTAGENT_TOPIC,
                                     conf.hostagent.host, [self.manager])
        self._stopping = threading.Event()
        self._heartbeat = threading.Thread(
            target=self._register_forever, name='heartbeat', daemon=True)

    def start(self):
        self.server.start()
        self._heartbeat.start()

    def stop(self):
        """Take no more requests and let those running finish, for at
        most graceful_shutdown_timeout seconds. True if some did not (or
        the bus did not let go): the process must exit without them."""
        self._stopping.set()
        grace = self.conf.hostagent.graceful_shutdown_timeout
        stopper = threading.Thread(target=self._stop_server,
                                   name='stop-server', daemon=True)
        stopper.start()
        stopper.join(grace)
        if not stopper.is_alive():
            return False
        running = self.manager.running()
        if running:
            LOG.warning('Exiting with %d request(s) still running after '
                        'graceful_shutdown_timeout (%d s): %s; their '
                        'conductors see them unanswered', len(running),
                        grace, ', '.join(running))
        else:
            LOG.warning('Exiting: the message bus did not close within '
                        'graceful_shutdown_timeout (%d s)', grace)
        return True

    def _stop_server(self):
        self.server.stop()
        self.server.wait()

    def _register_forever(self):
        while not self._stopping.is_set():
            try:
                self.conductors.register_agent(self.manager.context,
                                               self.conf.hostagent.host,
                                               self.manager.facts())
            except Exception as e:
                LOG.warning('Could not register with the conductors: %s', e)
            self._stopping.wait(self.conf.hostagent.heartbeat_interval)


def main():
    runtime.tune_malloc()
    from tenks import daemon
    daemon.run('hostagent', HostAgent)
