"""Stages of many atoms that run in any order."""

from taskflow.patterns import unordered_flow

# The most children of one unordered flow (see unordered).
FANOUT = 32


def unordered(name, atoms):
    """An unordered flow of ``atoms``, nested in flows of at most FANOUT
    children each (named ``<name>/<level>.<index>``, stable for a
    resume).

    TaskFlow's compiler copies the graph merged so far for each child of
    a flow (taskflow.types.graph.merge_graphs), so one flow of n atoms
    costs n² to compile; a tree of them costs n * FANOUT * depth.
    """
    level = 0
    atoms = list(atoms)
    while len(atoms) > FANOUT:
        atoms = [unordered_flow.Flow('%s/%d.%d' % (name, level, start))
                 .add(*atoms[start:start + FANOUT])
                 for start in range(0, len(atoms), FANOUT)]
        level += 1
    return unordered_flow.Flow(name).add(*atoms)
