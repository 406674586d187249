"""Time a simulated cluster at scale (issue 23): N nodes on H
tenks-hostagent processes with the fake drivers (hostagent.drivers.fake),
one tenks-conductor, on this machine's RabbitMQ (a private vhost).

For each size of --nodes it deploys a cluster, tears it down and prints:
deploy and teardown seconds, deploy cost per node (ms), the conductor's
CPU seconds and peak RSS (MiB), the hostagents' CPU seconds, and the
AMQP frames per node the services sent the broker during the deploy and
the teardown (rabbitmqctl's recv_cnt of the vhost's open connections: a
message published is 3 frames, its acknowledgement 1).

    .venv/bin/python tools/scale_simulated.py [--nodes 1000 10000]
        [--agents 50] [--latency 0]

Removes the vhost and every file it made (a temporary directory), also
when it fails; keeps the services' logs then and says where.
"""
# ruff: noqa: E402

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
import time
import warnings

warnings.filterwarnings('ignore', category=DeprecationWarning)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from tests.functional import distributed_fixtures as df
from tests.functional import simulated_fixtures as sf


def frames(vhost):
    """AMQP frames the open connections of ``vhost`` have sent."""
    out = df.SHARED.ctl('list_connections', 'vhost', 'recv_cnt').stdout
    return sum(int(count) for line in out.splitlines()[1:]
               for name, count in [line.split('\t')] if name == vhost)


def run(size, agents, latency, tmp):
    cluster = sf.SimulatedCluster(tmp / ('n%d' % size), agents,
                                  fake='latency = %s\n' % latency,
                                  conductor_options='agent_timeout = 600\n')
    with cluster:
        pids = cluster.pids()
        conductor = pids['conductor']
        agent_pids = [pid for name, pid in pids.items() if name != 'conductor']
        cpu0 = sf.cpu_seconds(conductor)
        agents0 = sum(map(sf.cpu_seconds, agent_pids))
        spec = cluster.spec('simscale', size)
        frames0 = frames(cluster.vhost)
        start = time.monotonic()
        op = cluster.wait(cluster.api.deploy_cluster(df.ADMIN, spec),
                          timeout=3600)
        deploy = time.monotonic() - start
        if op['state'] != 'succeeded':
            raise SystemExit('deploy of %d nodes: %s (%s); logs in %s' % (
                size, op['state'], op.get('error'), cluster.tmp))
        cpu_deploy = sf.cpu_seconds(conductor) - cpu0
        frames1 = frames(cluster.vhost)
        start = time.monotonic()
        op = cluster.wait(cluster.api.teardown_cluster(df.ADMIN, 'simscale'),
                          timeout=3600)
        teardown = time.monotonic() - start
        if op['state'] != 'succeeded':
            raise SystemExit('teardown of %d nodes: %s (%s); logs in %s' % (
                size, op['state'], op.get('error'), cluster.tmp))
        return {
            'nodes': size, 'agents': agents, 'deploy_s': deploy,
            'teardown_s': teardown, 'ms_per_node': 1000 * deploy / size,
            'conductor_cpu_deploy_s': cpu_deploy,
            'conductor_cpu_s': sf.cpu_seconds(conductor) - cpu0,
            'conductor_peak_rss_mb': sf.peak_rss_mb(conductor),
            'agents_cpu_s': sum(map(sf.cpu_seconds, agent_pids)) - agents0,
            'deploy_frames_per_node': (frames1 - frames0) / size,
            'teardown_frames_per_node': (frames(cluster.vhost) - frames1)
            / size,
        }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--nodes', type=int, nargs='+', default=[1000])
    parser.add_argument('--agents', type=int, default=50)
    parser.add_argument('--latency', type=float, default=0)
    args = parser.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix='tenks-fake-scale-'))
    rows = []
    try:
        for size in args.nodes:
            rows.append(run(size, args.agents, args.latency, tmp))
            print(rows[-1], flush=True)
    except BaseException:
        print('logs kept in %s' % tmp, file=sys.stderr)
        raise
    shutil.rmtree(tmp)
    keys = list(rows[0])
    print(' '.join('%22s' % k for k in keys))
    for row in rows:
        print(' '.join('%22.1f' % row[k] if isinstance(row[k], float)
                       else '%22s' % row[k] for k in keys))
    if len(rows) > 1:
        print('per-node cost at %d nodes / at %d: %.2f' % (
            rows[-1]['nodes'], rows[0]['nodes'],
            rows[-1]['ms_per_node'] / rows[0]['ms_per_node']))


if __name__ == '__main__':
    main()
