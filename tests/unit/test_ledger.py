"""The ledger's rules on their own (flows.ledger), on a real state
database: who a thing is credited to once the agent answers, what a
refusal drops, and which records a removal keeps."""

import types

import pytest

from flows import ledger
from tenks import exceptions
from tenks import states
from tenks.db import api as db_api
from tenks.db import migration

OP = 'op-this'
OTHER = 'op-earlier'


@pytest.fixture
def svc(tmp_path):
    engine = db_api.create_engine('sqlite:///%s' % (tmp_path / 'state.db'))
    migration.upgrade(engine)
    yield types.SimpleNamespace(db=db_api.StateDB(engine))
    engine.dispose()


def wanted(*names):
    return [('volume', name, {'name': name}) for name in names]


def record(svc, name, operation, state):
    """A thing recorded by an earlier request, as it left it."""
    svc.db.begin_resources('c', 'hv1', operation, wanted(name))
    if state == states.RESOURCE_PRESENT:
        svc.db.finish_resources('hv1', {('volume', name): operation})


def recorded(svc):
    """{name: (state, credit)} of what the record holds on hv1."""
    return {r.name: (r.state, r.operation)
            for r in svc.db.list_resources(hypervisor='hv1')}


def conflict():
    return exceptions.ResourceConflict(kind='volume', name='a', owner='c',
                                       reason='somebody else made it')


def row(state, operation):
    return {'state': state, 'operation': operation}


PRESENT, CREATING = states.RESOURCE_PRESENT, states.RESOURCE_CREATING


@pytest.mark.parametrize('before,created,credit', [
    # Present before: its credit stands, re-created or not.
    (row(PRESENT, OTHER), True, OTHER),
    (row(PRESENT, None), True, None),
    (row(PRESENT, OP), False, OP),
    # Created by this request: this operation's.
    (None, True, OP),
    (row(CREATING, OTHER), True, OP),
    # Asked for before by this operation (a retry, a resume).
    (row(CREATING, OP), False, OP),
    # Otherwise nobody's.
    (None, False, None),
    (row(CREATING, OTHER), False, None),
])
def test_credit(before, created, credit):
    assert ledger.credit(before, created, OP) == credit


@pytest.mark.parametrize('before,created,credit', [
    (row(CREATING, OTHER), False, OTHER),
    (row(CREATING, OTHER), True, OP),
    (None, False, None),
    (row(PRESENT, None), True, None),
])
def test_one_thing_keeps_the_credit_another_operation_left(before, created,
                                                           credit):
    assert ledger.credit(before, created, OP, keep_others=True) == credit


def test_begin_records_what_is_new_creating_and_credited(svc):
    record(svc, 'old', None, PRESENT)
    before = ledger.begin(svc, 'c', 'hv1', OP, wanted('old', 'new'))
    assert list(before) == [('volume', 'old')]
    assert recorded(svc) == {'old': (PRESENT, None), 'new': (CREATING, OP)}


def test_finish_records_present_with_each_credit(svc):
    record(svc, 'kept', OTHER, PRESENT)
    record(svc, 'retried', OP, CREATING)
    record(svc, 'gone', OTHER, PRESENT)
    things = wanted('kept', 'retried', 'made', 'found')
    before = ledger.begin(svc, 'c', 'hv1', OP, things)
    ledger.finish(svc, 'hv1', things, before, {('volume', 'made')}, OP,
                  removed={('volume', 'gone')})
    assert recorded(svc) == {'kept': (PRESENT, OTHER),
                             'retried': (PRESENT, OP),
                             'made': (PRESENT, OP),
                             'found': (PRESENT, None)}


def test_finish_one_keeps_the_answer_and_another_operations_credit(svc):
    record(svc, 'a', OTHER, CREATING)
    before = ledger.begin(svc, 'c', 'hv1', OP, wanted('a'))
    credit = ledger.finish_one(svc, 'hv1', 'volume', 'a',
                               before[('volume', 'a')], False, OP,
                               {'created': False, 'mac': 'm'})
    assert credit == OTHER
    row = svc.db.get_resource('hv1', 'volume', 'a')
    assert (row.state, row.operation, row.data) == (
        PRESENT, OTHER, {'created': False, 'mac': 'm'})


def test_a_refusal_drops_only_what_was_not_recorded_before(svc):
    record(svc, 'old', OTHER, CREATING)
    things = wanted('old', 'new')
    before = ledger.begin(svc, 'c', 'hv1', OP, things)
    ledger.drop_unrecorded(svc, 'hv1', things, before)
    assert recorded(svc) == {'old': (CREATING, OTHER)}


def test_restore_credits_nothing_to_the_revert(svc):
    record(svc, 'old', OTHER, PRESENT)
    record(svc, 'added', OP, PRESENT)
    things = wanted('old', 'again')
    before = ledger.begin(svc, 'c', 'hv1', OP, things)
    ledger.restore(svc, 'hv1', things, before, {('volume', 'added')})
    assert recorded(svc) == {'old': (PRESENT, OTHER),
                             'again': (PRESENT, None)}


def test_removal_drops_the_records(svc):
    record(svc, 'a', OP, PRESENT)
    record(svc, 'b', OP, PRESENT)
    answer = ledger.remove(svc, 'hv1', [('volume', 'a')],
                           lambda **kwargs: kwargs, changed=True)
    assert answer == ({'changed': True}, None)
    assert recorded(svc) == {'b': (PRESENT, OP)}


def test_a_thing_found_not_ours_is_left_and_its_record_dropped(svc):
    record(svc, 'a', OP, PRESENT)
    error = conflict()

    def refuse():
        raise error

    assert ledger.remove(svc, 'hv1', [('volume', 'a')], refuse) == (
        None, error)
    assert recorded(svc) == {}


def test_a_failed_removal_keeps_the_records(svc):
    record(svc, 'a', OP, PRESENT)

    def fail():
        raise exceptions.AgentTimeout(host='hv1', method='remove_volume',
                                      timeout=1)

    with pytest.raises(exceptions.AgentTimeout):
        ledger.remove(svc, 'hv1', [('volume', 'a')], fail)
    assert recorded(svc) == {'a': (PRESENT, OP)}


@pytest.mark.parametrize('error,kept', [
    (None, {}),
    (conflict(), {}),
    (RuntimeError('libvirt gone'), {'a': (CREATING, OP)}),
])
def test_a_revert_keeps_the_record_only_when_the_removal_fails(
        svc, caplog, error, kept):
    record(svc, 'a', OP, CREATING)

    def request(name):
        if error is not None:
            raise error
        return {'changed': True}

    ledger.remove_or_keep(svc, 'hv1', [('volume', 'a')], 'volume a on hv1',
                          request, name='a')
    assert recorded(svc) == kept
    if error is not None:
        assert 'volume a on hv1 while reverting: %s' % error in caplog.text
