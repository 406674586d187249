"""The packages keep their layers: flows depend only on the core and
the hostagent's RPC API, the core (``tenks`` outside its CLI) on none of
the others, the hostagent reaches the conductor only through its RPC
API, and the hostagent's drivers import nothing of the agent above them;
the scheduler reads nothing but its arguments. The CLI is the
composition root above them all.

Within them: only ``tenks/cloud/`` talks to the cloud (openstacksdk,
keystoneauth); of the flows, only the ledger (``flows/ledger.py``)
writes the records of resources; a flow module uses no other flow
module's tasks (the modules that build flows may use the tasks of those
that only hold tasks, and each other's factories); the conductor takes
from the flows their factories only, and installs their clients
(``flows.context``)."""

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
                         'tenks.notifier',
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


# What only tenks/cloud/ may do: import the cloud libraries, or reach
# a service through a connection's proxies.
CLOUD_PACKAGE = 'tenks/cloud/'
CLOUD_LIBRARIES = ('openstack', 'keystoneauth1')
PROXIES = ('baremetal', 'compute', 'image', 'endpoint_for')
HTTP_METHODS = ('get', 'put', 'post', 'patch', 'delete')


def cloud_calls(source):
    """(line, what) of each cloud library import and each use of a
    connection's proxies (``conn.baremetal``, ``conn.placement.get``...)
    in ``source``."""
    found = [(line, name) for line, name in imported(source)
             if _within(name, CLOUD_LIBRARIES)]
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in PROXIES:
            found.append((node.lineno, '.' + node.attr))
        elif (node.attr in HTTP_METHODS
              and isinstance(node.value, ast.Attribute)
              and node.value.attr == 'placement'):
            found.append((node.lineno, '.placement.' + node.attr))
    return sorted(found)


def test_only_the_cloud_package_calls_the_cloud():
    found = ['%s:%d %s' % (path, line, what)
             for package in ('tenks', 'flows', 'conductor', 'hostagent')
             for path, source in _sources(package)
             if not path.startswith(CLOUD_PACKAGE)
             for line, what in cloud_calls(source)]
    assert found == []


# The state database's writes of resource records, which the flows make
# only through the ledger.
LEDGER = 'flows/ledger.py'
RECORD_WRITES = ('begin_resources', 'finish_resource', 'finish_resources',
                 'delete_resource', 'delete_resources')


def record_writes(source):
    """(line, method) of each use of a record write in ``source``."""
    return sorted((node.lineno, node.attr) for node in ast.walk(
        ast.parse(source)) if isinstance(node, ast.Attribute)
        and node.attr in RECORD_WRITES)


def test_only_the_ledger_writes_resource_records_in_the_flows():
    found = ['%s:%d %s' % (path, line, method)
             for path, source in _sources('flows') if path != LEDGER
             for line, method in record_writes(source)]
    assert found == []


def test_record_writes_are_found_in_every_form():
    source = '''
def make(svc, db):
    svc.db.begin_resources('c', 'hv', 'op', [])
    finish = db.finish_resources
    db.delete_resource('hv', 'pool', 'p')
    db.get_resource('hv', 'pool', 'p')
'''
    assert record_writes(source) == [(3, 'begin_resources'),
                                     (4, 'finish_resources'),
                                     (5, 'delete_resource')]


def flow_uses(source):
    """(line, flow module, name) of each name ``source`` takes from a
    module of ``flows``: ``from flows import m`` then ``m.name``, or
    ``from flows.m import name``; name None where the module itself is
    imported."""
    modules = {}
    uses = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == 'flows':
            for alias in node.names:
                modules[alias.asname or alias.name] = alias.name
                uses.append((node.lineno, alias.name, None))
        elif isinstance(node, ast.ImportFrom) and node.module and (
                node.module.startswith('flows.')):
            for alias in node.names:
                uses.append((node.lineno, node.module[6:], alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith('flows.') and alias.asname:
                    modules[alias.asname] = alias.name[6:]
                    uses.append((node.lineno, alias.name[6:], None))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules):
            uses.append((node.lineno, modules[node.value.id], node.attr))
    return sorted(uses, key=lambda use: (use[0], use[1], use[2] or ''))


def _flow_modules():
    """{name: (classes it defines, whether it builds flows)} of each
    module of ``flows``; a module that imports TaskFlow's patterns builds
    flows, the others only hold tasks."""
    modules = {}
    for path in sorted((ROOT / 'flows').glob('*.py')):
        tree = ast.parse(path.read_text())
        classes = {node.name for node in tree.body
                   if isinstance(node, ast.ClassDef)}
        builds = any(_within(name, ('taskflow.patterns',))
                     for _, name in imported(path.read_text()))
        modules[path.stem] = (classes, builds)
    return modules


def foreign_tasks(module, source, modules):
    """(line, module.Class) of each task ``source`` (of flow module
    ``module``) takes from another module that builds flows."""
    return [(line, '%s.%s' % (other, name))
            for line, other, name in flow_uses(source)
            if other != module and other in modules
            and modules[other][1] and name in modules[other][0]]


def test_flows_use_no_other_flows_tasks():
    modules = _flow_modules()
    found = ['%s:%d uses %s' % (path, line, name)
             for path, source in _sources('flows')
             for line, name in foreign_tasks(
                 pathlib.Path(path).stem, source, modules)]
    assert found == []


# What the conductor may take from the flows besides their factories.
CONDUCTOR_FLOW_CLIENTS = 'context'


def not_factories(source):
    """(line, what) of each thing ``source`` takes from the flows that
    is neither a flow factory (``get_<kind>_flow``) nor the flows'
    clients."""
    found = []
    for line, module, name in flow_uses(source):
        if module == CONDUCTOR_FLOW_CLIENTS or name is None:
            continue
        if not (name.startswith('get_') and name.endswith('_flow')):
            found.append((line, '%s.%s' % (module, name)))
    return found


def test_the_conductor_takes_only_factories_from_the_flows():
    found = ['%s:%d uses %s' % (path, line, what)
             for path, source in _sources('conductor')
             for line, what in not_factories(source)]
    assert found == []


def test_cloud_calls_are_found_in_every_form():
    source = '''
import openstack
from keystoneauth1 import session

def lazy(conn, cloud):
    from openstack import exceptions
    conn.baremetal.nodes()
    cloud.connection.compute.find_flavor('x')
    conn.endpoint_for('placement')
    conn.placement.put('/x', json={})
    conductor.aggregates.host_views()
'''
    assert cloud_calls(source) == [
        (2, 'openstack'), (3, 'keystoneauth1.session'),
        (6, 'openstack.exceptions'), (7, '.baremetal'), (8, '.compute'),
        (9, '.endpoint_for'), (10, '.placement.put')]


def test_foreign_tasks_are_found_in_every_form():
    modules = {'deploy': ({'Step'}, True), 'teardown': ({'Remove'}, True),
               'records': ({'Mark'}, False)}
    source = '''
from flows import records
from flows import teardown as td
from flows.teardown import Remove, removals
import flows.teardown as tear

class Mine(td.Remove):
    pass

def build(rows):
    return [records.Mark(), tear.Remove(rows), td.removals(rows), Step()]
'''
    assert foreign_tasks('deploy', source, modules) == [
        (4, 'teardown.Remove'), (7, 'teardown.Remove'),
        (11, 'teardown.Remove')]


def test_the_conductor_rule_allows_factories_and_clients_only():
    source = '''
from flows import context
from flows import deploy
from flows.teardown import get_teardown_flow, teardown_plan

def run():
    context.install(None)
    deploy.get_deploy_flow(1)
    deploy.host_removal([])
'''
    assert not_factories(source) == [(4, 'teardown.teardown_plan'),
                                     (9, 'deploy.host_removal')]
