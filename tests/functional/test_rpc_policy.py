"""Policy on every call, on RabbitMQ: another service, with an
oslo.messaging client of its own (no Tenks code: the topic, exchange,
version and argument names the README gives), calls the conductor with
its users' request contexts. A member deploys and tears down, and can
neither delete a hypervisor nor read what is for admins; a reader reads
only; a call without a context (an older client's) is refused."""

import datetime
import time

import oslo_messaging as messaging
import pytest
from oslo_config import cfg
from oslo_context import context as oslo_context

from tenks import exceptions
from tenks import policy
from tenks import rpc
from tests.functional import cluster_fixtures as cf
from tests.functional import distributed_fixtures as df

pytestmark = pytest.mark.functional

ADMIN = policy.admin_context()
MEMBER = oslo_context.RequestContext(
    user_id='u-member', project_id='p1', roles=['member']).to_dict()
READER = oslo_context.RequestContext(
    user_id='u-reader', project_id='p1', roles=['reader']).to_dict()
# What every caller sees of a hypervisor.
PUBLIC = {'host', 'enabled', 'maintenance', 'last_seen', 'answered_at',
          'state', 'nodes'}


@pytest.fixture(scope='module')
def deployment(tmp_path_factory):
    with df.Deployment(tmp_path_factory.mktemp('policy')) as d:
        yield d


@pytest.fixture
def env(tmp_path, deployment):
    cluster = cf.ClusterEnv(tmp_path, port_base=7740,
                            state_dirs=deployment.state_dirs.values())
    with cf.checked(cluster):
        yield cluster


class Outside:
    """Another service's client of the conductor: its own transport."""

    def __init__(self, url, exmods=('tenks.exceptions',)):
        conf = cfg.ConfigOpts()
        # oslo.messaging registers some of its groups on cfg.CONF only,
        # which a service uses: here a ConfigOpts of the test's own.
        rpc.register_opts(conf)
        conf([], default_config_files=[])
        self.transport = messaging.get_rpc_transport(
            conf, url=url, allowed_remote_exmods=list(exmods))
        self.client = messaging.get_rpc_client(
            self.transport, messaging.Target(
                exchange='tenks', topic='tenks-conductor', version='1.5'),
            timeout=60)

    def call(self, context, method, **kwargs):
        return self.client.call(context, method, **kwargs)

    def wait(self, context, operation_id, timeout=180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            operation = self.call(context, 'get_operation',
                                  operation_id=operation_id)
            if operation['state'] != 'running':
                return operation
            time.sleep(0.2)
        raise AssertionError('operation %s did not end' % operation_id)

    def close(self):
        self.transport.cleanup()


def refused(rule, call, *args, **kwargs):
    with pytest.raises(exceptions.PolicyNotAuthorized,
                       match='Policy does not allow %s ' % rule):
        call(*args, **kwargs)


def test_a_member_deploys_and_a_reader_reads(deployment, env):
    hva, hvb = deployment.hosts
    tenks = Outside(deployment.url)
    try:
        refused('tenks:cluster:deploy', tenks.call, READER, 'deploy_cluster',
                spec=env.spec(count=2))
        refused('tenks:cluster:list', tenks.call, {}, 'list_clusters')
        operation = tenks.wait(READER, tenks.call(
            MEMBER, 'deploy_cluster', spec=env.spec(count=2)))
        assert operation['state'] == 'succeeded', operation['error']
        assert operation['kind'] == 'deploy'

        # Readers read, without the deployment's UUID...
        cluster = tenks.call(READER, 'get_cluster', name=env.cluster)
        assert cluster['state'] == 'deployed'
        assert len(cluster['nodes']) == 2
        assert 'uuid' not in cluster
        assert [c for c in tenks.call(READER, 'list_clusters')
                if 'uuid' in c] == []
        deployment_uuid = deployment.api.get_cluster(
            ADMIN, env.cluster)['uuid']
        assert len(deployment_uuid) == 36
        assert {n['name'] for n in tenks.call(
            READER, 'list_nodes', cluster=env.cluster)} == {
            n['name'] for n in cluster['nodes']}
        # ... and hypervisors without what is for admins.
        for context in (READER, MEMBER):
            listed = tenks.call(context, 'list_hypervisors')
            assert {h['host'] for h in listed} >= {hva, hvb}
            assert [set(h) for h in listed] == [PUBLIC] * len(listed)
            assert set(tenks.call(context, 'get_hypervisor',
                                  host=hva)) == PUBLIC
        assert 'physnet_mappings' in deployment.api.get_hypervisor(
            ADMIN, hva)['facts']

        # Members cannot manage hypervisors nor aggregates; readers
        # change nothing.
        refused('tenks:hypervisor:delete', tenks.call, MEMBER,
                'delete_hypervisor', host=hvb)
        refused('tenks:hypervisor:update', tenks.call, MEMBER,
                'update_hypervisor', host=hvb, enabled=False, reason='x')
        refused('tenks:hypervisor:maintenance', tenks.call, MEMBER,
                'start_host_maintenance', host=hvb, reason='x')
        refused('tenks:aggregate:list', tenks.call, MEMBER,
                'list_aggregates')
        refused('tenks:cluster:teardown', tenks.call, READER,
                'teardown_cluster', name=env.cluster)
        refused('tenks:cluster:plan', tenks.call, READER, 'plan_cluster',
                spec=env.spec(count=3))
        # Nor speak for a hostagent: once the hostagents have registered
        # again since, the forged registration has been refused.
        sent = datetime.datetime.now(datetime.timezone.utc)
        tenks.client.cast(MEMBER, 'register_agent', host='forged',
                          facts={'cpus': 64})
        deployment.wait_for_agents([hva, hvb], since=sent)
        assert {h['host'] for h in deployment.api.list_hypervisors(
            ADMIN)} == {hva, hvb}

        operation = tenks.wait(MEMBER, tenks.call(
            MEMBER, 'teardown_cluster', name=env.cluster))
        assert operation['state'] == 'succeeded', operation['error']
        assert env.leftovers() == []
    finally:
        tenks.close()


def test_without_allowed_remote_exmods_errors_are_remote_errors(
        deployment):
    tenks = Outside(deployment.url, exmods=())
    try:
        with pytest.raises(messaging.RemoteError) as raised:
            tenks.call(READER, 'delete_hypervisor', host='nope')
        assert raised.value.exc_type == 'PolicyNotAuthorized'
        with pytest.raises(messaging.RemoteError) as raised:
            tenks.call(ADMIN.to_dict(), 'get_operation', operation_id='x')
        assert raised.value.exc_type == 'OperationNotFound'
    finally:
        tenks.close()
