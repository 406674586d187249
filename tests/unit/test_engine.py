"""The conductor's TaskFlow engine (conductor.engine): the order it runs
a stage's atoms in, and what finding the next atoms costs."""

import collections
import threading
from concurrent import futures

import pytest
from taskflow import engines
from taskflow import task
from taskflow.patterns import linear_flow

from conductor import engine
from flows import stages


class Recorded(task.Task):
    """Records its execution and revert in ``log``; fails if told."""

    def __init__(self, name, log, fails=False):
        super().__init__(name=name)
        self.log = log
        self.fails = fails

    def execute(self):
        self.log.append(('execute', self.name))
        if self.fails:
            raise RuntimeError('%s failed' % self.name)

    def revert(self, **kwargs):
        self.log.append(('revert', self.name))


def staged_flow(log, count, failing=None):
    flow = linear_flow.Flow('f')
    flow.add(Recorded('first', log))
    flow.add(stages.unordered('stage', [
        Recorded('t%d' % n, log, fails=n == failing) for n in range(count)]))
    flow.add(Recorded('last', log))
    return flow


@pytest.fixture
def lookups(monkeypatch):
    """How many times the selector read an atom's state."""
    counted = collections.Counter()
    lock = threading.Lock()
    real = engine.Selector._done_itself

    def done_itself(self, node):
        with lock:
            counted['lookups'] += 1
        return real(self, node)

    monkeypatch.setattr(engine.Selector, '_done_itself', done_itself)
    return counted


def run(flow, workers=4):
    with futures.ThreadPoolExecutor(workers) as executor:
        engines.load(flow, engine='tenks-parallel',
                     executor=executor).run()


def test_a_stage_runs_after_what_comes_before_and_before_what_follows():
    log = []
    run(staged_flow(log, 300))
    executed = [name for what, name in log if what == 'execute']
    assert executed[0] == 'first' and executed[-1] == 'last'
    assert sorted(executed[1:-1]) == sorted('t%d' % n for n in range(300))


def test_the_done_part_of_a_stage_is_not_walked_again_for_each_atom(
        lookups):
    run(staged_flow([], 600), workers=1)
    # Each search walked the stage's done atoms again: 12 lookups an
    # atom at 500 atoms, 16 at 4,000.
    assert lookups['lookups'] / 600 < 6


def test_a_failure_in_a_stage_reverts_what_ran_and_runs_nothing_after():
    log = []
    with pytest.raises(RuntimeError, match='t40 failed'):
        run(staged_flow(log, 100, failing=40))
    executed = {name for what, name in log if what == 'execute'}
    reverted = {name for what, name in log if what == 'revert'}
    assert 'last' not in executed
    assert 'first' in reverted
    assert executed - {'t40'} <= reverted
