"""Flow graphs: what TaskFlow runs of a flow, as data and as Graphviz dot.

``describe(flow)`` compiles a flow as TaskFlow's engines do and gives its
execution graph as JSON data (the conductor's get_operation_graph
answers it, with each task's state); ``dot(graph)`` draws that data. The
docs (doc/source/_exts/flow_graphs.py) and ``tenks operation graph``
both draw with them.
"""

# A task's state as a user reads it, and its colour; a task whose state
# is not known (None) is left white, with no state in its label.
COLOURS = {
    'done': '#c8e6c9',
    'failed': '#ef9a9a',
    'reverting': '#ffe0b2',
    'reverted': '#ffe0b2',
    'running': '#fff59d',
    'pending': '#eeeeee',
}


def describe(flow):
    """The compiled execution graph of ``flow``: {'nodes': [{'name',
    'kind', 'state'}], 'edges': [[from, to]]}, edges by node index; a
    node's kind is TaskFlow's ('task', 'retry', 'flow' where a flow
    begins, 'flow_end'), its state None."""
    from taskflow.engines.action_engine import compiler
    graph = compiler.PatternCompiler(flow).compile().execution_graph
    index = {atom: i for i, atom in enumerate(graph.nodes)}
    return {
        'nodes': [{'name': atom.name, 'kind': data['kind'], 'state': None}
                  for atom, data in graph.nodes(data=True)],
        'edges': sorted([index[a], index[b]] for a, b in graph.edges),
    }


def _quoted(*lines):
    """A dot string of ``lines``, one under the other."""
    return '"%s"' % '\\n'.join(
        line.replace('\\', '\\\\').replace('"', '\\"') for line in lines)


def dot(graph, title=None):
    """Graphviz dot of ``graph`` (as describe gives it): tasks as boxes,
    filled by their state (COLOURS) and labelled with it when known."""
    lines = ['digraph flow {', '  rankdir=LR;',
             '  node [fontname="sans-serif", fontsize=10];']
    if title:
        lines.append('  labelloc=t; label=%s;' % _quoted(title))
    for i, node in enumerate(graph['nodes']):
        if node['kind'] == 'flow':
            attrs = 'shape=cds, style=filled, fillcolor="#e8eef7", ' \
                    'label=%s' % _quoted(node['name'])
        elif node['kind'] == 'flow_end':
            attrs = 'shape=point'
        elif node['state'] is None:
            attrs = 'shape=box, label=%s' % _quoted(node['name'])
        else:
            attrs = 'shape=box, style=filled, fillcolor="%s", label=%s' % (
                COLOURS[node['state']],
                _quoted(node['name'], node['state']))
        lines.append('  n%d [%s];' % (i, attrs))
    lines += ['  n%d -> n%d;' % (a, b) for a, b in graph['edges']]
    return '\n'.join(lines + ['}']) + '\n'
