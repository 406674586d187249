"""BMC requests check ownership (hostagent API 1.9): a BMC is made only
for a domain of its owner, and one made for another owner is neither
changed nor removed, by the BMC requests nor by the node requests."""

import json
import os

from hostagent.drivers.bmc import daemon_dirs
from hostagent.drivers.bmc import sushy
from tests.unit import fakes
from tests.unit import test_nodes

agent = test_nodes.agent
node = test_nodes.node
OWNER = test_nodes.OWNER
OTHER = 'tenks:c:b'
UUID = node()['uuid']


def request(agent, method, *args):
    """Run a hostagent request as a cast would; its reported outcome."""
    request_id = 'r%d' % len(agent.conductor.sent)
    getattr(agent, method)({}, request_id, 'c1', *args)
    sent_id, outcome = agent.conductor.sent[-1]
    assert sent_id == request_id
    return outcome


def ensure_bmc(agent, *owner, port=6230):
    return request(agent, 'ensure_bmc', 'n0', '127.0.0.1', port, 'admin',
                   'hush', *owner)


def error(outcome):
    return outcome['error']['type'], outcome['error']['message']


def test_a_bmc_is_made_only_for_a_domain_of_its_owner(agent, hypervisor):
    kind, message = error(ensure_bmc(agent, OWNER))
    assert kind == 'DriverError' and 'n0' in message
    hypervisor.things[('domain', 'n0')] = {}
    hypervisor.fail[('domain', 'n0')] = fakes.conflict('Domain', 'n0')
    kind, message = error(ensure_bmc(agent, OWNER))
    assert kind == 'ResourceConflict' and 'Domain n0' in message
    assert hypervisor.names('bmc') == []

    del hypervisor.fail[('domain', 'n0')]
    assert ensure_bmc(agent, OWNER) == {
        'result': {'created': True, 'changed': True}}
    # Recorded with the hostagent's mark, as the domain is marked.
    assert hypervisor.bmc_owners == {'n0': agent.nodes.mark(OWNER)}


def test_a_bmc_of_another_owner_is_neither_changed_nor_removed(
        agent, hypervisor):
    agent.nodes.ensure(node(), OTHER, False)
    kind, message = error(ensure_bmc(agent, OWNER, port=6231))
    assert kind == 'ResourceConflict' and 'BMC of domain n0' in message
    kind, _ = error(request(agent, 'remove_bmc', 'n0', OWNER))
    assert kind == 'ResourceConflict'
    assert agent.nodes.inspect([node()], OWNER)['nodes'] == {
        UUID: [['bmc', 'n0', 'foreign']]}
    kind, message = error(request(agent, 'remove_node', dict(
        node(), nics=[{'tap': 'n0t0'}]), OWNER))
    assert kind == 'ResourceConflict' and 'BMC of domain n0' in message
    assert hypervisor.things[('bmc', 'n0')] == ('127.0.0.1', 6230)
    assert hypervisor.bmc_owners == {'n0': agent.nodes.mark(OTHER)}


def test_bmc_requests_without_an_owner_are_refused(agent, hypervisor):
    """An older conductor's: it cannot say whose BMC it means."""
    agent.nodes.ensure(node(), OWNER, False)
    for outcome in (ensure_bmc(agent, port=6231),
                    request(agent, 'remove_bmc', 'n0')):
        kind, message = error(outcome)
        assert kind == 'InvalidNodeRequest' and 'owner' in message
    assert hypervisor.things[('bmc', 'n0')] == ('127.0.0.1', 6230)


def test_a_redfish_system_is_removed_from_its_owner_emulator_only(
        agent, conf):
    """The real sushy-tools driver's files (no emulator runs): a
    remove_bmc of another deployment leaves the system served."""
    redfish = agent.nodes.redfish = sushy.SushyDriver(conf)
    path = redfish._dirs.path(OWNER)
    os.makedirs(path, mode=0o700)
    daemon_dirs.write(os.path.join(path, 'owner'), OWNER)
    daemon_dirs.write(os.path.join(path, 'systems'), json.dumps({'n0': UUID}))

    assert request(agent, 'remove_bmc', 'n0', OTHER) == {
        'result': {'changed': False}}
    assert sushy._all_served(path) == {'n0': UUID}
    assert request(agent, 'remove_bmc', 'n0', OWNER) == {
        'result': {'changed': True}}
    assert not os.path.exists(path)
