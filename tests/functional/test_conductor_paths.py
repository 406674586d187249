"""Conductor failure paths on the real components: a teardown that finds
one of its things replaced by somebody else's, and an Ironic enrolment
that fails after it created the node."""

import random

import libvirt
import pytest

from tenks import exceptions
from tenks import node_records
from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of
from tests.functional import test_enrolment

pytestmark = pytest.mark.functional

# This module's IPMI ports: 8150-8199.
PORT_BASE = 8150


@pytest.fixture
def env(tmp_path):
    with cf.checked(cf.ClusterEnv(tmp_path, port_base=PORT_BASE)) as cluster:
        yield cluster



@pytest.fixture
def cloud_env(tmp_path, openstack_services, cloud):
    cluster = cf.ClusterEnv(tmp_path, port_base=PORT_BASE + 10)
    of.use_services(cluster, openstack_services)
    with cf.checked(cluster):
        yield cluster
        left = of.remove_ironic_nodes(cloud, cluster.node_prefix)
        assert left == [], 'the test left %s behind' % left


def test_teardown_leaves_a_replaced_domain_and_says_so(env):
    env.deploy(env.spec(count=2))
    replaced = env.node_name(1)
    conn = libvirt.open(cf.URI)
    try:
        # Somebody removes our domain and defines one of the same name.
        dom = conn.lookupByName(replaced)
        if dom.isActive():
            dom.destroy()
        dom.undefine()
        foreign = conn.defineXML(
            "<domain type='qemu'><name>%s</name><memory unit='MiB'>64"
            "</memory><os><type arch='x86_64'>hvm</type></os></domain>"
            % replaced)
        foreign_uuid = foreign.UUIDString()
        try:
            result = env.teardown()
            [warning] = result['warnings']
            # One removal per node: the warning names the node, and the
            # domain it kept.
            assert warning.startswith(
                'Left parts of node %s on ' % replaced), warning
            assert 'no longer ours' in warning
            assert 'Domain %s' % replaced in warning
            assert 'not owned' in warning
            # The foreign domain is untouched; nothing of ours remains,
            # in the machine or in the record.
            assert conn.lookupByName(replaced).UUIDString() == foreign_uuid
            assert env.leftovers() == ['domain %s' % replaced]
            with pytest.raises(exceptions.ClusterNotFound):
                env.teardown()
        finally:
            conn.lookupByName(replaced).undefine()
    finally:
        conn.close()


def test_enrolment_failing_after_create_leaves_no_ironic_node(
        cloud_env, cloud, monkeypatch):
    env = cloud_env
    # Ironic refuses the node's port: another node has its MAC.
    mac = '52:54:00:%02x:%02x:%02x' % tuple(
        random.randrange(256) for _ in range(3))
    holder = cloud.baremetal.create_node(name=env.node_prefix + 'holder',
                                         driver='fake-hardware')
    try:
        cloud.baremetal.create_port(node_id=holder.id, address=mac)
        monkeypatch.setattr(node_records, 'new_mac', lambda taken: mac)
        with pytest.raises(exceptions.OperationFailed) as raised:
            env.deploy(test_enrolment.enrolled_spec(env, count=1))
        message = str(raised.value)
        assert 'ironic_node:openstack:' in message, message
        assert mac in message
        assert 'rolled back' in message
        # The node this deploy created in Ironic is gone with the rest.
        assert [n.name for n in cloud.baremetal.nodes()
                if n.name.startswith(env.node_prefix)] == [holder.name]
        assert env.nodes() == []
        assert env.leftovers() == []
        # So a re-run meets no conflict.
        monkeypatch.undo()
        env.deploy(test_enrolment.enrolled_spec(env, count=1))
        env.teardown()
    finally:
        cloud.baremetal.delete_node(holder.id)
