"""The packages keep their layers: flows depend only on the core and
the hostagent's RPC API, the core (``tenks`` outside its CLI) on none of
the others, the hostagent reaches the conductor only through its RPC
API, and the hostagent's drivers import nothing of the agent above them;
the scheduler reads nothing but its arguments. The CLI is the
composition root above them all."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# (where, forbidden imports, allowed exceptions among them)
RULES = [
    ('flows', ('conductor', 'hostagent', 'tenks.cli'), ('hostagent.rpcapi',)),
    ('tenks', ('conductor', 'hostagent', 'flows', 'tenks.cli'), ()),
    ('hostagent', ('conductor', 'flows', 'tenks.cli'), ('conductor.rpcapi',)),
    ('conductor', ('hostagent', 'tenks.cli'), ('hostagent.rpcapi',)),
    # A host choice is a function of its arguments: no database, bus,
    # cloud or flow.
    ('tenks/scheduler', ('conductor', 'flows', 'hostagent', 'tenks.cli',
                         'tenks.db', 'tenks.rpc', 'tenks.cloud',
                         'tenks.placement_aggregates', 'tenks.notifier',
                         'sqlalchemy', 'taskflow', 'oslo_messaging',
                         'openstack'), ()),
    ('hostagent/drivers', ('hostagent', 'conductor', 'flows', 'tenks.cli'),
     ('hostagent.drivers',)),
]
# Modules that a rule's package holds but that sit above it.
EXEMPT = ('tenks/cli/',)


def _within(name, prefixes):
    return any(name == p or name.startswith(p + '.') for p in prefixes)


def imported(source):
    """Every module (or module attribute) ``source`` imports, with the
    line, at any depth: lazy imports in functions count too."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            # 'from conductor import rpcapi' imports conductor.rpcapi.
            for alias in node.names:
                yield node.lineno, '%s.%s' % (node.module, alias.name)


def violations(source, forbidden, allowed):
    return [(line, name) for line, name in imported(source)
            if _within(name, forbidden) and not _within(name, allowed)]


def _sources(package):
    for path in sorted((ROOT / package).rglob('*.py')):
        relative = path.relative_to(ROOT).as_posix()
        if not relative.startswith(EXEMPT):
            yield relative, path.read_text()


@pytest.mark.parametrize('package,forbidden,allowed', RULES,
                         ids=[rule[0] for rule in RULES])
def test_package_imports_only_the_layers_below(package, forbidden, allowed):
    found = ['%s:%d imports %s' % (path, line, name)
             for path, source in _sources(package)
             for line, name in violations(source, forbidden, allowed)]
    assert found == []


def test_forbidden_imports_are_found_in_every_form():
    source = '''
import conductor
import conductor.agents as agents
from conductor import rpcapi, services
from hostagent.rpcapi import HostAgentAPI

def lazy():
    from tenks.cli import embedded
'''
    forbidden = ('conductor', 'hostagent', 'tenks.cli')
    assert violations(source, forbidden, ('hostagent.rpcapi',)) == [
        (2, 'conductor'), (3, 'conductor.agents'),
        (4, 'conductor.rpcapi'), (4, 'conductor.services'),
        (8, 'tenks.cli.embedded')]


def test_drivers_may_import_only_drivers_and_the_core():
    [(forbidden, allowed)] = [(forbidden, allowed) for where, forbidden,
                              allowed in RULES if where == 'hostagent/drivers']
    source = '''
from hostagent import transfer
from hostagent.drivers import base
from hostagent.drivers.bmc import processes
import hostagent.manager
from conductor import rpcapi
from tenks import exceptions
'''
    assert violations(source, forbidden, allowed) == [
        (2, 'hostagent.transfer'), (5, 'hostagent.manager'),
        (6, 'conductor.rpcapi')]
