"""``tenks operation graph``: an operation's flow as Graphviz dot (or
SVG), rebuilt from its recorded plan, each task with its state."""

import re

import pytest

from conductor import rpcapi as conductor_rpcapi
from tenks import exceptions
from tenks import flow_graph
from tenks import policy
from tenks.db import api as db_api
from tests.unit.conftest import make_conf
from tests.unit.test_cli import SPEC
from tests.unit.test_cli import write
from tests.unit.test_rpcapi import Bus


def drawn(dot):
    """({task or flow name: state or None}, {(from, to)}) of a dot
    graph, edges by name (flow ends are left out)."""
    names, states = {}, {}
    for ident, attrs in re.findall(r'^  (n\d+) \[(.*)\];$', dot, re.M):
        label = re.search(r'label="([^"]*)"', attrs)
        if label is not None:
            name, _, state = label.group(1).partition('\\n')
            names[ident] = name
            states[name] = state or None
            if state:
                assert 'fillcolor="%s"' % flow_graph.COLOURS[state] in attrs
    edges = {(names[a], names[b]) for a, b in re.findall(
        r'^  (n\d+) -> (n\d+);$', dot, re.M) if a in names and b in names}
    return states, edges


def operation(tenks):
    return tenks('operation', 'list', '-f', 'json').json()[-1]['id']


def test_a_deploy_is_drawn_with_its_tasks_and_their_order(tenks, tmp_path,
                                                          hypervisor):
    assert tenks('deploy', write(tmp_path, 'unit.yaml', SPEC)).code == 0
    uuids = [n['uuid'] for n in tenks('node', 'list', '-f', 'json').json()]
    graph = tenks('operation', 'graph', operation(tenks))
    assert graph.code == 0, graph.err
    assert graph.out.startswith('digraph flow {')
    states, edges = drawn(graph.out)
    tasks = {'cluster:deploying', 'pool:vm:tenks-unit', 'bridge:vm:brtenks0',
             'cluster:commit', 'node:vm:0'}
    assert {name: states[name] for name in tasks} == dict.fromkeys(
        tasks, 'done')
    assert {('deploy:unit', 'cluster:deploying'),
            ('cluster:deploying', 'host-setup'),
            ('host-setup', 'pool:vm:tenks-unit')} <= edges
    # Its nodes, one hypervisor's: one task.
    assert len(uuids) > 1
    assert ('nodes', 'node:vm:0') in edges


def test_the_task_that_failed_is_marked_before_and_after_its_flow_goes(
        tenks, tmp_path, state_dir, hypervisor):
    """While its flow is kept, each task's state is the flow's; once
    pruned, the record still names the task that failed."""
    hypervisor.fail[('domain', 'tk1')] = exceptions.DriverError(
        driver='fake', action='define tk1', reason='disk full')
    assert tenks('deploy', write(tmp_path, 'unit.yaml', SPEC)).code == 1
    operation_id = operation(tenks)
    [failed_task] = re.findall(r'(node:vm:\d+): ', tenks(
        'operation', 'show', operation_id, '-f', 'json').json()['error'])
    states, _ = drawn(tenks('operation', 'graph', operation_id).out)
    assert states[failed_task] == 'failed'
    assert states['pool:vm:tenks-unit'] == 'reverted'
    assert states['cluster:commit'] == 'pending'

    db = db_api.StateDB(db_api.create_engine(
        db_api.url(make_conf(state_dir))))
    assert db.prune()['flows'] == 1
    db.engine.dispose()
    states, _ = drawn(tenks('operation', 'graph', operation_id).out)
    assert states[failed_task] == 'failed'
    assert states['pool:vm:tenks-unit'] is None


def test_an_unknown_operation_or_one_without_a_flow_is_named(
        tenks, tmp_path, hypervisor):
    unknown = tenks('operation', 'graph', 'nope')
    assert unknown.code == 1
    assert 'No operation nope' in unknown.err
    path = write(tmp_path, 'unit.yaml', SPEC)
    assert tenks('deploy', path).code == 0
    assert tenks('deploy', path).code == 0
    unchanged = tenks('operation', 'graph', operation(tenks))
    assert unchanged.code == 1
    assert ('has no flow to draw: it ended succeeded without one (it had '
            'nothing to change' in unchanged.err)


def test_svg_without_graphviz_names_the_missing_program(
        tenks, tmp_path, hypervisor, monkeypatch):
    assert tenks('deploy', write(tmp_path, 'unit.yaml', SPEC)).code == 0
    monkeypatch.setenv('PATH', str(tmp_path / 'empty'))
    output = tmp_path / 'flow.svg'
    result = tenks('operation', 'graph', operation(tenks), '--format',
                   'svg', '-o', output)
    assert result.code == 1
    assert ('Cannot write the graph as svg: Graphviz\'s "dot" program is '
            'not on PATH: install graphviz' in result.err)
    assert not output.exists()


def test_a_conductor_older_than_1_9_is_not_asked():
    capped = conductor_rpcapi.ConductorAPI(Bus(conductor='1.8'))
    with pytest.raises(exceptions.VersionCapped,
                       match='get_operation_graph needs version 1.9'):
        capped.get_operation_graph(policy.admin_context(), 'op1')
