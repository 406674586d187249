"""The README's contract for other services holds: the fields it lists
for what the RPC calls return, and the RPC timeout a client sets."""

import os
import re
import time

import oslo_messaging as messaging
import pytest

from conductor import rpcapi
from tenks import conf as tenks_conf
from tenks import rpc
from tenks.db import models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def documented(call):
    """The top-level fields the README's table gives for ``call``."""
    with open(os.path.join(ROOT, 'README.md')) as f:
        readme = f.read()
    [row] = [line for line in readme.splitlines()
             if line.startswith('| `%s(' % call)]
    returns = row.split('|')[2]
    # Field names, without the nested ones in (...) or [...].
    returns = re.sub(r'\([^()]*\)|\[[^][]*\]', '', returns)
    return set(re.findall(r'`(\w+)`', returns))


@pytest.mark.parametrize('call,model,extra,hidden', [
    ('get_operation', models.Operation, set(), {'plan'}),
    ('list_nodes', models.Node, set(), set()),
    ('list_clusters', models.Cluster, set(), set()),
    ('list_hypervisors', models.Hypervisor, {'state', 'nodes'}, set()),
    ('list_events', models.Event, set(), set()),
])
def test_readme_lists_every_field_returned(call, model, extra, hidden):
    columns = {c.name for c in model.table.c}
    assert documented(call) == columns - hidden | extra


@pytest.mark.parametrize('timeout,configured', [(0.5, 60), (None, 1)])
def test_client_timeout_bounds_a_call(timeout, configured):
    conf = tenks_conf.new_conf()
    rpc.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override('rpc_response_timeout', configured)
    bus = rpc.Bus(conf, url=rpc.EMBEDDED_TRANSPORT_URL)
    try:
        # No conductor listens: the call waits for the client's timeout,
        # else for rpc_response_timeout.
        api = rpcapi.ConductorAPI(bus, timeout=timeout)
        started = time.monotonic()
        with pytest.raises(messaging.MessagingTimeout):
            api.list_clusters({})
        assert time.monotonic() - started < 5
    finally:
        bus.cleanup()
