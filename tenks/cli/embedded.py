"""Embedded mode: conductor and local hostagent in one process.

The CLI wires them here, above both packages: this is the composition
root, and no module of ``tenks`` outside the CLI imports either.

They talk over oslo.messaging's in-memory transport, exactly as they do
over RabbitMQ in distributed mode.
"""

import contextlib

from futurist import _thread as futurist_thread

from conductor import conductor as tenks_conductor
from hostagent import server as hostagent_server
from tenks import rpc


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
    # The RPC servers' idle worker threads poll for work every second,
    # and stopping a server (and exiting the process) joins them: that
    # second would be most of a short command's run time.
    futurist_thread.ThreadWorker.MAX_IDLE_FOR = 0.01
    bus = rpc.Bus(conf, url=rpc.EMBEDDED_TRANSPORT_URL)
    agent = hostagent_server.HostAgent(conf, bus)
    conductor = tenks_conductor.Conductor(conf, bus, check_policy)
    agent.start()
    conductor.start()
    # The local hostagent's heartbeat registers it a moment later: the
    # first command in a new state directory finds it registered already.
    if conductor.db.get_hypervisor(conf.hostagent.host) is None:
        conductor.registry.register_agent(conf.hostagent.host,
                                          agent.manager.facts())
    # Operations no later one of their cluster would end (embedded, no
    # conductor resumes what a killed tenks command left running).
    conductor.end_orphans()
    try:
        yield conductor
    finally:
        if exits:
            conductor.drain()
        else:
            conductor.stop()
            agent.stop()
            bus.cleanup()
