"""The reduced fault-injection matrix (tests/functional/fault_suite.py;
the full one: tools/fault_matrix.py): for each operation, a failure
injected into a task and a kill at a task boundary, each case checked
by the audit; the cases kept are those that found a bug."""

import fnmatch

import pytest

from tests.functional import fault_suite as fs

pytestmark = pytest.mark.functional

# IPMI ports of this module: 9700-9739.
PORT_BASE = 9700

# (operation, fault kind, task pattern or boundary)
CASES = [
    # A pool, a bridge or an uplink answered with an error was
    # forgotten, not rolled back: a leftover.
    ('deploy', fs.FAIL, 'pool:*'),
    ('deploy', fs.KILL, 4),
    # A failed first task left the cluster 'failed'.
    ('grow', fs.FAIL, 'cluster:deploying'),
    ('grow', fs.KILL, 1),
    # A node whose removal was answered with an error stayed 'deployed'.
    ('shrink', fs.FAIL, 'remove:*'),
    ('shrink', fs.KILL, 2),
    ('teardown', fs.FAIL, 'cluster:deleting'),
    ('teardown', fs.KILL, 3),
]


@pytest.fixture(scope='module')
def bystanders(tmp_path_factory):
    with fs.Bystanders(tmp_path_factory.mktemp('bystanders'),
                       PORT_BASE + 30) as found:
        yield found


@pytest.fixture(scope='module')
def references(tmp_path_factory):
    """The reference run of each operation, made when first asked."""
    made = {}

    def get(name):
        if name not in made:
            made[name] = fs.Reference(fs.OPERATIONS[name],
                                      tmp_path_factory.mktemp(name),
                                      PORT_BASE)
        return made[name]
    return get


@pytest.mark.parametrize('operation,kind,argument', CASES,
                         ids=['%s-%s:%s' % case for case in CASES])
def test_fault(operation, kind, argument, references, bystanders,
               tmp_path):
    reference = references(operation)
    if kind == fs.FAIL:
        assert any(fnmatch.fnmatchcase(task, argument)
                   for task in reference.tasks), reference.tasks
    else:
        assert argument <= len(reference.tasks), reference.tasks
    outcome = fs.run_case(fs.OPERATIONS[operation], reference, kind,
                          argument, tmp_path, PORT_BASE, bystanders)
    print('%s %s:%s: %s' % (operation, kind, argument, outcome))
