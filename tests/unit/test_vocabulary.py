"""Each state and shared constant is defined once: no two modules of
the product assign the same word (or the same tuple of words, or the
same power such as ``1024 ** 3``) to a module-level constant. States
live in tenks/states.py, shared constants in tenks/constants.py."""

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ('conductor', 'flows', 'hostagent', 'tenks')
# Frozen history: each migration keeps its own copies.
SKIPPED = ('tenks/db/migrations/versions/',)

# Constants that share a value with another by coincidence, not meaning.
COINCIDENCES = {
    # The IPMI host's word for a BMC that serves, in its own protocol.
    ('hostagent/drivers/bmc/ipmi_host.py', 'RUNNING'),
    # A BMC fault's kind, and the IPMI host's word for a BMC it cannot
    # serve.
    ('tenks/bmc_faults.py', 'ERROR'),
    # The conductor's and the hostagent's APIs number their versions
    # each on its own.
    ('conductor/rpcapi.py', 'RPC_API_VERSION'),
    ('hostagent/rpcapi.py', 'RPC_API_VERSION'),
    ('hostagent/rpcapi.py', 'DEADLINES'),
    # File name suffixes of two unrelated directories.
    ('hostagent/deployments.py', 'SUFFIX'),
    ('hostagent/drivers/bmc/ipmi_store.py', 'SUFFIX'),
    # The jobboard's default namespace and the bus's exchange: both the
    # project's name.
    ('conductor/jobboard.py', 'DEFAULT_NAMESPACE'),
}


def _word(node):
    return isinstance(node, ast.Constant) and (
        node.value is None or isinstance(node.value, str))


def value_of(node):
    """The value a constant's definition compares by: a string, a
    tuple, list, set or frozenset of strings (None allowed among them),
    or a power such as ``1024 ** 3``; None for anything else."""
    if isinstance(node, ast.Call) and getattr(
            node.func, 'id', None) == 'frozenset' and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and (
            all(_word(e) for e in node.elts)):
        return tuple(sorted(map(repr, (e.value for e in node.elts))))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return ast.unparse(node).replace(' ', '')
    return None


def definitions(source):
    """(name, value) of each module-level constant of ``source``."""
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.lstrip('_').isupper()):
            value = value_of(node.value)
            if value is not None:
                yield node.targets[0].id, value


def defined_twice(sources):
    """{value: ['path:NAME', ...]} of the values that modules of
    ``sources`` ({path: source}) other than one define."""
    where = collections.defaultdict(dict)
    for path, source in sources.items():
        for name, value in definitions(source):
            if (path, name) not in COINCIDENCES:
                where[value].setdefault(path, name)
    return {value: sorted('%s:%s' % item for item in modules.items())
            for value, modules in where.items() if len(modules) > 1}


def test_each_state_and_constant_is_defined_once():
    sources = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob('*.py')):
            relative = path.relative_to(ROOT).as_posix()
            if not relative.startswith(SKIPPED):
                sources[relative] = path.read_text()
    assert defined_twice(sources) == {}


def test_a_second_definition_is_found_in_every_form():
    states = '''
OPERATION_FAILED = 'failed'
NODE_FAILED = 'failed'
STOPPED = (None, 'shut off', 'crashed')
FREE = frozenset(('enroll', 'available'))
GIB = 1024 ** 3
'''
    elsewhere = '''
FAILED = 'failed'
POWERED_OFF = (None, 'crashed', 'shut off')
IDLE = frozenset(['available', 'enroll'])
GIB = 1024**3
TIMEOUT = 10
LOG = logging.getLogger(__name__)
'''
    found = defined_twice({'tenks/states.py': states,
                           'flows/move.py': elsewhere})
    assert sorted(found.values()) == [
        ['flows/move.py:FAILED', 'tenks/states.py:OPERATION_FAILED'],
        ['flows/move.py:GIB', 'tenks/states.py:GIB'],
        ['flows/move.py:IDLE', 'tenks/states.py:FREE'],
        ['flows/move.py:POWERED_OFF', 'tenks/states.py:STOPPED']]
    # One module may give one value several names (a cluster's and a
    # node's 'failed').
    assert defined_twice({'tenks/states.py': states}) == {}
