"""Memory of a long-running conductor and hostagent (distributed, real
RabbitMQ and libvirt): what they keep of each operation and request must
not pile up. tools/bench_memory.py shows the same over 500 deploys."""

import pytest

from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df

pytestmark = pytest.mark.functional

# Deploys before the first measure: connections, lazily loaded modules,
# every thread of the RPC servers (they add one a request up to THREADS),
# and the outcomes a hostagent keeps for a while (until their request's
# deadline, AGENT_TIMEOUT seconds) are all there by then.
WARM_UP = 12
THREADS = 8
AGENT_TIMEOUT = 10
# Enough deploys that what a reading catches in flight (a message's
# buffers, up to about 90 KiB in a hostagent, whatever the deploys) is
# small beside a leak: over 25 deploys it came to 1.1-3.6 KiB a deploy,
# once over the limit below; over 75, 0.6-1.1 KiB.
DEPLOYS = 75
# Bytes of Python heap one failed deploy may leave behind in a service.
# Before they forgot finished flows and old outcomes, the conductor and
# the hostagent that makes the node kept about 8.4 KiB a deploy each.
PER_DEPLOY = 3072


def test_failed_deploys_leave_conductor_and_hostagent_memory_flat(
        tmp_path):
    with df.Deployment(tmp_path / 'services', agent_timeout=AGENT_TIMEOUT,
                       probe=True, threads=THREADS) as d:
        env = cf.ClusterEnv(tmp_path, port_base=9680,
                            state_dirs=d.state_dirs.values())
        with cf.checked(env):
            spec = env.spec(count=1)
            spec['node_types']['small']['volumes'] = [{
                'capacity': '64MiB', 'format': 'qcow2',
                'image': str(tmp_path / 'missing.qcow2')}]

            def deploy(times):
                for _ in range(times):
                    operation = d.wait(d.api.deploy_cluster(df.ADMIN, spec))
                    assert operation['state'] == 'failed', operation
                    assert 'missing.qcow2' in operation['error'], operation

            deploy(WARM_UP)
            before = d.python_heaps()
            deploy(DEPLOYS)
            kept = {host: (heap - before[host]) // DEPLOYS
                    for host, heap in d.python_heaps().items()}
    assert all(b < PER_DEPLOY for b in kept.values()), (
        'bytes kept per failed deploy: %s' % kept)
