"""The hostagent: serves requests for one hypervisor."""

from hostagent import manager
from tenks import rpc


class HostAgent:

    def __init__(self, conf, bus):
        self.manager = manager.HostAgentManager(conf, bus)
        self.server = bus.get_server(rpc.HOSTAGENT_TOPIC,
                                     conf.hostagent.host, [self.manager])

    def start(self):
        self.server.start()

    def stop(self):
        self.server.stop()
        self.server.wait()


def main():
    from tenks import service
    service.run('hostagent', HostAgent)
