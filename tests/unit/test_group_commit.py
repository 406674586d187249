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


def test_what_follows_a_commit_is_waited_for_outside_the_next_one():
    """``applied`` gets what its request's commit returned, on the
    request's thread, and a request waiting there holds up no commit:
    the second request commits while the first still waits."""
    first_waits = threading.Event()
    second_committed = threading.Event()
    seen = []

    def commit(commands):
        if commands == ['second']:
            second_committed.set()
        return 'txn-%s' % commands[0]

    def applied(committed):
        seen.append((threading.current_thread().name, committed))
        if committed == 'txn-first':
            first_waits.set()
            assert second_committed.wait(5)

    group = group_commit.GroupCommit(commit, applied)
    first = threading.Thread(target=group.run, args=(['first'],),
                             name='first')
    first.start()
    assert first_waits.wait(5)
    group.run(['second'])
    first.join(5)
    assert not first.is_alive()
    assert sorted(seen) == [('MainThread', 'txn-second'),
                            ('first', 'txn-first')]


def test_a_failed_commit_waits_for_nothing():
    seen = []
    group = group_commit.GroupCommit(Ledger(delay=0), seen.append)
    with pytest.raises(ValueError):
        group.run(['bad'])
    assert seen == []
