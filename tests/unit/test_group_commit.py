"""Open vSwitch transactions made at the same time share one commit,
and a failing one fails only its own request."""

import threading
import time

import pytest

from hostagent.drivers.network import group_commit


class Ledger:
    """A commit function that records each transaction, slowly, and
    refuses any holding a command named 'bad'."""

    def __init__(self, delay=0.05):
        self.delay = delay
        self.commits = []
        self.lock = threading.Lock()

    def __call__(self, commands):
        time.sleep(self.delay)
        if 'bad' in commands:
            raise ValueError('bad command')
        with self.lock:
            self.commits.append(list(commands))


def run_together(commit, requests):
    """Run each request on a thread of its own, all at once; {request
    index: error or None}."""
    start = threading.Barrier(len(requests))
    outcome = {}

    def run(i, commands):
        start.wait()
        try:
            commit.run(commands)
        except Exception as e:
            outcome[i] = e
        else:
            outcome[i] = None
    threads = [threading.Thread(target=run, args=(i, commands))
               for i, commands in enumerate(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return outcome


def test_a_request_alone_is_committed_alone():
    ledger = Ledger(delay=0)
    commit = group_commit.GroupCommit(ledger)
    commit.run(['a', 'b'])
    commit.run(['c'])
    assert ledger.commits == [['a', 'b'], ['c']]


def test_requests_made_meanwhile_share_a_commit():
    """Sixteen threads, each two commands: the first commits alone and
    the others, queued behind it, in far fewer transactions, each
    request's commands together and in order."""
    ledger = Ledger()
    commit = group_commit.GroupCommit(ledger)
    requests = [['add-%d' % i, 'mark-%d' % i] for i in range(16)]
    outcome = run_together(commit, requests)
    assert outcome == dict.fromkeys(range(16))
    assert len(ledger.commits) <= 3
    committed = [c for commits in ledger.commits for c in commits]
    assert sorted(committed) == sorted(c for r in requests for c in r)
    for i in range(16):
        assert committed.index('mark-%d' % i) == committed.index(
            'add-%d' % i) + 1


def test_a_failing_request_fails_alone():
    """A shared transaction that fails is made again request by
    request: the others are committed, the bad one gets its error."""
    ledger = Ledger()
    commit = group_commit.GroupCommit(ledger)
    requests = [['ok-%d' % i] for i in range(8)]
    requests[5] = ['bad']
    outcome = run_together(commit, requests)
    assert isinstance(outcome.pop(5), ValueError)
    assert outcome == dict.fromkeys(outcome)
    assert sorted(c for commits in ledger.commits for c in commits) == [
        'ok-%d' % i for i in range(8) if i != 5]


def test_the_error_reaches_its_caller():
    commit = group_commit.GroupCommit(Ledger(delay=0))
    with pytest.raises(ValueError):
        commit.run(['bad'])
    commit.run(['fine'])




def test_each_request_gets_what_its_commit_returned():
    """What follows a commit (ovs-vswitchd applying it) is the caller's
    to wait for, after run: run returns what the commit returned, the
    same to every request that shared it."""
    ledger = Ledger()

    def commit(commands):
        ledger(commands)
        return len(ledger.commits)
    group = group_commit.GroupCommit(commit)
    assert group.run(['alone']) == 1
    outcome = {}
    start = threading.Barrier(8)

    def run(i):
        start.wait()
        outcome[i] = group.run(['c-%d' % i])
    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    by_commit = {}
    for i, got in sorted(outcome.items()):
        by_commit.setdefault(got, []).append('c-%d' % i)
    assert len(by_commit) < 8
    assert {n: sorted(c) for n, c in by_commit.items()} == {
        n + 1: sorted(c) for n, c in enumerate(ledger.commits) if n}
