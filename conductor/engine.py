"""TaskFlow's parallel engine, its atoms found in the flow's hierarchy
by an index (entry point ``tenks-parallel`` of ``taskflow.engines``).

TaskFlow's engine walks the whole hierarchy of the flow to find each
atom's scope (taskflow.engines.action_engine.scopes.ScopeWalker, made
for every atom when the engine compiles): n\u00b2 for a flow of n atoms,
minutes for ten thousand nodes. The index finds each at once.
"""

from taskflow.engines.action_engine import compiler
from taskflow.engines.action_engine import engine


class IndexedHierarchy:
    """The hierarchy ``root`` (a taskflow.types.tree.Node), whose
    find() of an item looks it up in an index."""

    def __init__(self, root):
        self._root = root
        # Items are unique in a flow (TaskFlow checks it).
        self._nodes = {node.item: node
                       for node in root.dfs_iter(include_self=True)}

    def find(self, item, only_direct=False, include_self=True):
        if only_direct or not include_self:
            return self._root.find(item, only_direct=only_direct,
                                   include_self=include_self)
        return self._nodes.get(item)

    def __getattr__(self, name):
        return getattr(self._root, name)


class Compiler(compiler.PatternCompiler):

    def compile(self):
        compilation = super().compile()
        if not isinstance(compilation.hierarchy, IndexedHierarchy):
            self._compilation = compiler.Compilation(
                compilation.execution_graph,
                IndexedHierarchy(compilation.hierarchy))
        return self._compilation


class ParallelEngine(engine.ParallelActionEngine):

    def __init__(self, flow, flow_detail, backend, options):
        super().__init__(flow, flow_detail, backend, options)
        self._compiler = Compiler(flow)
