"""A hundred real Redfish nodes (domains defined, never started, behind
one sushy-tools emulator) enrolled in the real standalone Ironic until
each is available, then torn down, with the Ironic calls counted.

Redfish port 9098 (test_redfish keeps 9050-9099 for Redfish: this is
the top of it, unused there).
"""

import collections

import pytest
from keystoneauth1 import session as ksa_session

from tests.functional import openstack_fixtures as of
from tests.functional import test_redfish

pytestmark = pytest.mark.functional

COUNT = 100


@pytest.fixture
def env(tmp_path, openstack_services, cloud):
    cluster = test_redfish.RedfishEnv(tmp_path, port_base=9000)
    of.use_services(cluster, openstack_services)
    # As the README's scaling section says for a big cluster: nodes in
    # flight, and domains that never start may share CPUs and memory.
    cluster.conf.set_override('workers', 64, group='conductor')
    # All are managed at once: the last waits for Ironic's conductor to
    # verify all the others.
    cluster.conf.set_override('provision_timeout', 900, group='openstack')
    cluster.conf.set_override('vcpu_inventory', {'allocation_ratio': '100'},
                              group='hostagent')
    cluster.conf.set_override('memory_mb_inventory',
                              {'allocation_ratio': '10'}, group='hostagent')
    yield cluster
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


@pytest.fixture
def ironic_calls(monkeypatch, openstack_services):
    """[(method, url)] of every request to Ironic, by any connection."""
    calls = []
    real = ksa_session.Session.request

    def request(session, url, method, *args, **kwargs):
        if '/nodes' in url or '/ports' in url:
            calls.append((method, url))
        return real(session, url, method, *args, **kwargs)
    monkeypatch.setattr(ksa_session.Session, 'request', request)
    return calls


# Ironic's verification of each node through the emulator is most of
# it: about a minute, but more on a busy 2-CPU machine than the default
# 300 s allow.
@pytest.mark.timeout(900)
def test_a_hundred_redfish_nodes_become_available_and_go(env, cloud,
                                                        ironic_calls):
    spec = env.redfish_spec(9098, specs=[{
        'type': 'small', 'count': COUNT, 'node_name_prefix': env.node_prefix,
        'ironic_config': {'resource_class': 'tenks-scale'}}])
    env.deploy(spec)
    nodes = env.nodes()
    assert len(nodes) == COUNT
    uuids = {n['uuid'] for n in nodes}
    enrolled = [n for n in cloud.baremetal.nodes(
        fields=('uuid', 'provision_state', 'driver')) if n.id in uuids]
    assert collections.Counter(
        (n.driver, n.provision_state) for n in enrolled) == {
            ('redfish', 'available'): COUNT}
    polls = [c for c in ironic_calls
             if c[0] == 'GET' and 'last_error' in c[1]]
    per_node = [c for c in ironic_calls if c not in polls]
    # Create, port, manage, provide; and one list of the nodes at the
    # start. The waits share the polls.
    assert len(per_node) <= 4 * COUNT + 1, collections.Counter(
        '%s %s' % (m, u.split('?')[0].rsplit('/', 1)[-1])
        for m, u in per_node)
    assert len(polls) < len(per_node)

    ironic_calls.clear()
    env.teardown()
    # One DELETE a node, and one list of them before.
    assert len(ironic_calls) <= COUNT + 1
    assert [n.id for n in cloud.baremetal.nodes(fields=('uuid',))
            if n.id in uuids] == []
    assert env.leftovers() == []
