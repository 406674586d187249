"""Flow graphs drawn from the real flow factories.

``.. tenks-flow-graph:: deploy`` (or ``teardown``) plans a small cluster
with the real planner on a fake hypervisor's facts (the unit tests'),
records it in a throw-away state database, builds the operation's flow
with its factory (flows.deploy / flows.teardown), compiles it with
TaskFlow and draws the compiled execution graph with graphviz
(tenks.flow_graph, as ``tenks operation graph`` does): what the engine
runs, in the order it runs it.
"""

import contextlib
import os
import tempfile
import uuid

from sphinx.ext import graphviz
from sphinx.util.docutils import SphinxDirective

from conductor import planner
from flows import context
from flows import deploy
from flows import teardown
from tenks import flow_graph
from tenks import spec as tenks_spec
from tenks import states
from tenks.db import api
from tenks.db import migration
from tests.unit.test_scheduler import facts

# A small cluster that has every deploy stage: a pool and a bridge, two
# nodes enrolled in Ironic, a Nova flavor.
EXAMPLE = {
    'cluster': 'example',
    'node_types': {'small': {
        'memory_mb': 1024, 'vcpus': 1, 'volumes': [{'capacity': '10GiB'}],
        'physical_networks': ['physnet1']}},
    'specs': [{'type': 'small', 'count': 2,
               'ironic_config': {'resource_class': 'baremetal'}}],
    'nova_flavors': [{'resource_class': 'baremetal', 'node_type': 'small'}],
    'physical_networks': ['physnet1'],
}


@contextlib.contextmanager
def planned_operations():
    """A state database holding a planned deploy of EXAMPLE and a
    teardown of its nodes and host things (pool, bridge); yields their
    operation ids by kind, with the database installed as the flows'
    context."""
    spec = tenks_spec.validate(EXAMPLE)
    name = spec['cluster']
    with tempfile.TemporaryDirectory() as directory:
        engine = api.create_engine(
            'sqlite:///' + os.path.join(directory, 'state.db'))
        migration.upgrade(engine)
        db = api.StateDB(engine)
        db.save_cluster(name, spec, states.CLUSTER_SCHEDULED)
        plan, new = planner.plan_deploy(
            spec, db.get_cluster(name), {'hv1': facts()}, [], [], False)
        db.add_nodes(new)
        operations = {}
        for kind, operation_plan in (
                ('deploy', plan),
                ('teardown', planner.teardown_plan(
                    name, new, [dict(row, node=None)
                                for row in plan['host_ensure']]))):
            operations[kind] = str(uuid.uuid4())
            db.create_operation(operations[kind], name, kind, 'docs', spec)
            db.set_operation_plan(operations[kind], operation_plan)
        context.install(context.Clients(db=db, agents=None, notifier=None,
                                        cloud=None))
        try:
            yield operations
        finally:
            context.install(None)
            engine.dispose()


FACTORIES = {'deploy': deploy.get_deploy_flow,
             'teardown': teardown.get_teardown_flow}


def flow_dots():
    """{kind: dot} of the deploy and teardown flows of EXAMPLE."""
    with planned_operations() as operations:
        return {kind: flow_graph.dot(flow_graph.describe(
                    FACTORIES[kind](operation_id)))
                for kind, operation_id in operations.items()}


class FlowGraph(SphinxDirective):
    required_arguments = 1

    def run(self):
        cache = self.env.app
        if not hasattr(cache, 'tenks_flow_dots'):
            cache.tenks_flow_dots = flow_dots()
        node = graphviz.graphviz()
        node['code'] = cache.tenks_flow_dots[self.arguments[0]]
        node['options'] = {'docname': self.env.docname}
        node['alt'] = 'The %s flow' % self.arguments[0]
        return [node]


def setup(app):
    app.setup_extension('sphinx.ext.graphviz')
    app.add_directive('tenks-flow-graph', FlowGraph)
    return {'parallel_read_safe': True, 'parallel_write_safe': True}
