"""Embedded mode: conductor and local hostagent in one process.

The CLI wires them here, above both packages: this is the composition
root, and no module of ``tenks`` outside the CLI imports either.

They talk over oslo.messaging's in-memory transport, exactly as they do
over RabbitMQ in distributed mode.
"""

import contextlib

from oslo_log import log as logging

from conductor import conductor as tenks_conductor
from hostagent import server as hostagent_server
from tenks import rpc

LOG = logging.getLogger(__name__)


@contextlib.contextmanager
def embedded(conf, exits=False, check_policy=False):
    """Yield a started Conductor with a local hostagent beside it.

    ``check_policy``: check the calls on the in-memory bus against the
    policy rules as a distributed conductor does (its tests): only this
    process reaches that bus, so by default they all pass.

    ``exits``: the process exits when this ends (the ``tenks`` command,
    see tenks.cli.main.console_main), so once no operation runs, nothing
    is left to do: the RPC servers are not stopped, which would only
    wait for their listeners' next polls.
    """
    bus = rpc.Bus(conf, url=rpc.EMBEDDED_TRANSPORT_URL)
    agent = hostagent_server.HostAgent(conf, bus)
    conductor = tenks_conductor.Conductor(conf, bus, check_policy)
    agent.start()
    conductor.start()
    # Stopped whatever happens from here: on the in-memory bus (one per
    # process) a server left running would answer the next conductor's
    # calls.
    try:
        _register(conductor, agent, conf.hostagent.host)
        # Operations no later one of their cluster would end (embedded,
        # no conductor resumes what a killed tenks command left running).
        conductor.end_orphans()
        yield conductor
    finally:
        if exits:
            conductor.drain()
        else:
            with bus.stopping():
                conductor.stop()
                agent.stop()
                bus.cleanup()


def _register(conductor, agent, host):
    """Register the local hostagent if it never has: its heartbeat does a
    moment later, and the first command in a new state directory must
    find it. Its facts may not be readable (libvirt down): the heartbeat
    says so, and the command's own work names the problem."""
    if conductor.db.get_hypervisor(host) is not None:
        return
    try:
        facts = agent.manager.facts()
    except Exception as e:
        LOG.debug('Could not read the facts of %s to register it: %s',
                  host, e)
        return
    conductor.registry.register_agent(host, facts)
