"""TaskFlow's parallel engine, its atoms found in the flow's hierarchy
by an index (entry point ``tenks-parallel`` of ``taskflow.engines``),
and the atoms an atom's end may let run found among its next ones only.

TaskFlow's engine walks the whole hierarchy of the flow to find each
atom's scope (taskflow.engines.action_engine.scopes.ScopeWalker, made
for every atom when the engine compiles): n\u00b2 for a flow of n atoms,
minutes for ten thousand nodes. The index finds each at once.

When an atom ends, TaskFlow's selector checks every atom after it in the
flow, to the end of the flow, each by walking back through its
predecessors: a teardown of n nodes on h hypervisors checked the h
removals of each later stage after each node, n * h walks (see Selector).
"""

import collections

import fasteners
from taskflow import states
from taskflow.engines.action_engine import compiler
from taskflow.engines.action_engine import deciders
from taskflow.engines.action_engine import engine
from taskflow.engines.action_engine import runtime
from taskflow.engines.action_engine import selector
from taskflow.utils import misc


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


class Selector(selector.Selector):
    """TaskFlow's selector, whose search for the atoms that may run once
    ``atom`` has ended looks only as far as the flow is done, and
    learns once per search whether a part of the flow is.

    An atom may run when every atom before it (through flows, tasks and
    retries) has succeeded or was ignored (TaskFlow's ready_checker).
    TaskFlow's search checks every atom after ``atom`` to the end of the
    flow, each by walking back through all those before it: a teardown
    of n nodes on h hypervisors walked the n node removals for each of
    the h removals of the next stage after each node, n * h walks. This
    one finds the same atoms: it goes no further than a node (atom or
    flow) with something before it (or itself) not done, after which
    nothing may run, and remembers for the search which nodes are done
    with everything before them.
    """

    def __init__(self, runtime):
        super().__init__(runtime)
        # The nodes found done, with everything before them, by earlier
        # searches: they stay so until atoms are reset (a failure's
        # revert, a retry), when this is forgotten (Runtime.reset_atoms).
        # Without it each search walked again the done part of the
        # stage it is in: a few dozen lookups per atom.
        self.known_done = set()

    def _browse_atoms_for_execute(self, atom=None):
        if atom is None:
            yield from super()._browse_atoms_for_execute()
            return
        graph = self._execution_graph
        done = {}
        queue = collections.deque(graph.successors(atom))
        seen = set()
        while queue:
            node = queue.popleft()
            if node in seen:
                continue
            seen.add(node)
            if not graph.nodes[node].get('noop'):
                ready, decider = self._ready(node, done)
                if ready:
                    yield node, decider
            if self._done_before(node, done):
                queue.extend(graph.successors(node))

    def _ready(self, atom, done):
        """TaskFlow's _get_maybe_ready_for_execute, its walk back through
        the atoms before ``atom`` remembered in ``done``."""
        preds = self._execution_graph.predecessors
        return self._get_maybe_ready(
            atom, states.RUNNING, [states.EXECUTE], lambda: (),
            lambda _: all(self._done_before(pred, done)
                          for pred in preds(atom)),
            lambda: deciders.IgnoreDecider(
                atom, self._runtime.fetch_edge_deciders(atom)),
            for_what='execute')

    def _done_itself(self, node):
        """Whether ``node`` counts as done for those after it: a flow's
        start or end always does, an atom once it succeeded or was
        ignored."""
        if self._execution_graph.nodes[node].get('noop'):
            return True
        state, intention = self._storage.get_atoms_states(
            [node.name])[node.name]
        return (state in (states.SUCCESS, states.IGNORE)
                and intention in (states.EXECUTE, states.IGNORE))

    def _done_before(self, node, done):
        """Whether ``node`` and every node before it are done; ``done``:
        {node: that answer} of those known (it learns the answers
        found). Stops at the first node found not done: those on the
        way to it are not done either."""
        if node in self.known_done:
            return True
        if node in done:
            return done[node]
        preds = self._execution_graph.predecessors
        if not self._done_itself(node):
            done[node] = False
            return False
        path = [(node, iter(preds(node)))]
        while path:
            current, before = path[-1]
            for pred in before:
                known = pred in self.known_done or done.get(pred)
                if known:
                    continue
                if known is None and self._done_itself(pred):
                    path.append((pred, iter(preds(pred))))
                    break
                done[pred] = False
                for on_the_way, _ in path:
                    done[on_the_way] = False
                return False
            else:
                done[current] = True
                self.known_done.add(current)
                path.pop()
        return True


class Runtime(runtime.Runtime):

    def reset_atoms(self, atoms, state=states.PENDING,
                    intention=states.EXECUTE):
        self.selector.known_done.clear()
        return super().reset_atoms(atoms, state=state, intention=intention)

    @misc.cachedproperty
    def selector(self):
        return Selector(self)


class ParallelEngine(engine.ParallelActionEngine):

    def __init__(self, flow, flow_detail, backend, options):
        super().__init__(flow, flow_detail, backend, options)
        self._compiler = Compiler(flow)

    @fasteners.locked
    def compile(self):
        # TaskFlow's, with our Runtime.
        if self._compiled:
            return
        self._compilation = self._check_compilation(self._compiler.compile())
        self._runtime = Runtime(
            self._compilation, self.storage, self.atom_notifier,
            self._task_executor, self._retry_executor,
            options=self._options)
        self._runtime.compile()
        self._compiled = True
