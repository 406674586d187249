"""The hostagent manager runs each request id once."""

import logging
import threading
import time

from hostagent import manager
from tenks import rpc
from tests.unit import fakes


class Reports:

    def __init__(self):
        self.sent = []

    def report_result(self, context, conductor, request_id, host,
                      **outcome):
        self.sent.append((conductor, request_id, outcome))


def make_agent(conf):
    agent = manager.HostAgentManager(conf, rpc.Bus(conf))
    agent.conductor = Reports()
    return agent


def test_copy_of_a_running_request_joins_it(conf, hypervisor):
    agent = make_agent(conf)
    entered, release = fakes.block(agent.virt, 'ensure_volume')
    args = ('pool', 'v0', 1024, 'qcow2', 'tenks:c:a')
    first = threading.Thread(target=agent.ensure_volume,
                             args=({}, 'r1', 'cond-a', *args))
    first.start()
    assert entered.wait(10)
    agent.ensure_volume({}, 'r1', 'cond-b', *args)  # returns at once
    agent.ensure_volume({}, 'r1', 'cond-a', *args)
    assert agent.conductor.sent == []
    release.set()
    first.join(10)

    outcome = {'result': {'created': True, 'changed': True}}
    assert agent.conductor.sent == [('cond-a', 'r1', outcome),
                                    ('cond-b', 'r1', outcome),
                                    ('cond-a', 'r1', outcome)]
    assert hypervisor.calls['ensure_volume'] == 1
    # Later copies get the kept outcome.
    agent.ensure_volume({}, 'r1', 'cond-c', *args)
    assert agent.conductor.sent[-1] == ('cond-c', 'r1', outcome)
    assert hypervisor.calls['ensure_volume'] == 1


def test_failed_request_reports_its_error_to_every_copy(conf, hypervisor):
    agent = make_agent(conf)
    hypervisor.fail[('volume', 'v0')] = RuntimeError('disk on fire')
    agent.ensure_volume({}, 'r1', 'cond-a', 'pool', 'v0', 1, 'raw', 'o')
    agent.ensure_volume({}, 'r1', 'cond-b', 'pool', 'v0', 1, 'raw', 'o')
    assert [(c, o['error']['type']) for c, _, o in agent.conductor.sent] == [
        ('cond-a', 'HostAgentError'), ('cond-b', 'HostAgentError')]
    assert hypervisor.calls['ensure_volume'] == 1


def test_remove_waits_for_a_running_ensure_of_the_same_thing(conf,
                                                             hypervisor):
    """A revert's remove_volume sent while ensure_volume of that volume
    still runs (its conductor timed out) removes what the ensure made;
    requests on other things are not held up."""
    agent = make_agent(conf)
    entered, release = threading.Event(), threading.Event()
    ensure = agent.virt.ensure_volume

    def blocking(pool, name, *args):
        if name == 'v0':
            entered.set()
            release.wait(10)
        return ensure(pool, name, *args)

    agent.virt.ensure_volume = blocking
    owner = 'tenks:c:a'
    first = threading.Thread(target=agent.ensure_volume, args=(
        {}, 'op/v0/execute', 'cond-a', 'pool', 'v0', 1024, 'qcow2', owner))
    first.start()
    assert entered.wait(10)
    remover = threading.Thread(target=agent.remove_volume, args=(
        {}, 'op/v0/revert', 'cond-a', 'pool', 'v0', owner))
    remover.start()
    agent.ensure_volume({}, 'op/v1/execute', 'cond-a', 'pool', 'v1', 1024,
                        'qcow2', owner)
    remover.join(0.2)
    assert remover.is_alive()
    assert hypervisor.calls['remove_volume'] == 0
    release.set()
    first.join(10)
    remover.join(10)

    assert [(r, o['result']) for _, r, o in agent.conductor.sent] == [
        ('op/v1/execute', {'created': True, 'changed': True}),
        ('op/v0/execute', {'created': True, 'changed': True}),
        ('op/v0/revert', {'changed': True})]
    assert hypervisor.names('volume') == ['v1']
    assert agent._things == {}


def within(seconds, operation='op-1'):
    """A request context whose deadline is ``seconds`` from now."""
    return {'operation': operation, 'deadline': time.time() + seconds}


VOLUME = ('pool', 'v0', 1024, 'qcow2', 'tenks:c:a')


def test_request_past_its_deadline_is_dropped_unrun(conf, hypervisor,
                                                    caplog):
    """Its conductor no longer waits: nothing is done, reported or kept,
    so a copy sent again in time (a resumed operation) runs it."""
    agent = make_agent(conf)
    caplog.set_level(logging.INFO, logger='hostagent.manager')
    agent.ensure_volume(within(-1), 'r1', 'cond-a', *VOLUME)
    assert hypervisor.calls['ensure_volume'] == 0
    assert agent.conductor.sent == []
    assert 'Dropped request r1 of operation op-1 unrun' in caplog.text
    assert agent._running == {} and agent._recent == {}

    agent.ensure_volume(within(60), 'r1', 'cond-a', *VOLUME)
    assert hypervisor.names('volume') == ['v0']
    assert [r for _, r, _ in agent.conductor.sent] == ['r1']


def test_deadline_is_checked_once_the_locks_are_taken(conf, hypervisor):
    """A revert's remove_volume waits for the ensure_volume of the same
    volume that still runs; if its deadline passes meanwhile it is
    dropped, and what the ensure made stays."""
    agent = make_agent(conf)
    entered, release = fakes.block(agent.virt, 'ensure_volume')
    first = threading.Thread(target=agent.ensure_volume, args=(
        within(60), 'op/v0/execute', 'cond-a', *VOLUME))
    first.start()
    assert entered.wait(10)
    remover = threading.Thread(target=agent.remove_volume, args=(
        within(0.2), 'op/v0/revert', 'cond-a', 'pool', 'v0', VOLUME[-1]))
    remover.start()
    time.sleep(0.3)
    release.set()
    first.join(10)
    remover.join(10)

    assert [r for _, r, _ in agent.conductor.sent] == ['op/v0/execute']
    assert hypervisor.names('volume') == ['v0']
    assert hypervisor.calls['remove_volume'] == 0
    assert agent._running == {} and agent._things == {}


def test_finished_request_is_answered_after_its_deadline(conf, hypervisor):
    agent = make_agent(conf)
    agent.ensure_volume(within(60), 'r1', 'cond-a', *VOLUME)
    agent.ensure_volume(within(-1), 'r1', 'cond-b', *VOLUME)
    outcome = {'result': {'created': True, 'changed': True}}
    assert agent.conductor.sent == [('cond-a', 'r1', outcome),
                                    ('cond-b', 'r1', outcome)]
    assert hypervisor.calls['ensure_volume'] == 1


def test_copy_that_joins_extends_the_deadline(conf, hypervisor):
    """A resumed operation sends the request again with a later deadline
    while the first copy still waits for its locks: it runs, and both
    copies hear of it."""
    agent = make_agent(conf)
    entered, release = fakes.block(agent.virt, 'ensure_volume')
    holder = threading.Thread(target=agent.ensure_volume, args=(
        {}, 'other', 'cond-a', *VOLUME))
    holder.start()
    assert entered.wait(10)
    remover = threading.Thread(target=agent.remove_volume, args=(
        within(0.2), 'r1', 'cond-a', 'pool', 'v0', VOLUME[-1]))
    remover.start()
    time.sleep(0.05)
    agent.remove_volume(within(60), 'r1', 'cond-b', 'pool', 'v0',
                        VOLUME[-1])
    time.sleep(0.3)
    release.set()
    holder.join(10)
    remover.join(10)

    assert [(c, r) for c, r, _ in agent.conductor.sent] == [
        ('cond-a', 'other'), ('cond-a', 'r1'), ('cond-b', 'r1')]
    assert hypervisor.names('volume') == []



def test_outcome_is_kept_only_while_its_conductor_may_send_a_copy(
        conf, hypervisor):
    """Until the request's deadline a copy gets the kept outcome; later,
    a copy (a resumed operation) runs again, and what the agent kept of
    the requests whose deadline passed is gone, so it does not pile up
    with every request the agent ran."""
    agent = make_agent(conf)
    for i in range(3):
        agent.ensure_volume(within(0.3), 'r%d' % i, 'cond-a', 'pool',
                            'v%d' % i, 1024, 'qcow2', 'tenks:c:a')
    agent.ensure_volume(within(0.3), 'r0', 'cond-a', *VOLUME)
    assert hypervisor.calls['ensure_volume'] == 3
    time.sleep(0.4)

    agent.ensure_volume(within(60), 'r0', 'cond-b', *VOLUME)
    assert hypervisor.calls['ensure_volume'] == 4
    assert agent.conductor.sent[-1] == (
        'cond-b', 'r0', {'result': {'created': False, 'changed': False}})
    assert list(agent._recent) == ['r0']


def test_outcome_of_a_request_that_only_reads_is_not_kept(conf,
                                                          hypervisor):
    """A copy of an inspection reads again: its outcome, which can be
    large, is not kept."""
    agent = make_agent(conf)
    reads = []
    inspect = agent.nodes.inspect

    def counted(*args):
        reads.append(args)
        return inspect(*args)

    agent.nodes.inspect = counted
    for conductor in ('cond-a', 'cond-b'):
        agent.inspect_nodes(within(60), 'i1', conductor, [], 'tenks:c:a')
    assert len(reads) == 2
    assert [c for c, _, _ in agent.conductor.sent] == ['cond-a', 'cond-b']
    assert agent._recent == {}
