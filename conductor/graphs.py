"""The graph of an operation's flow, each task with its state
(``tenks operation graph``).

TaskFlow persists a flow's atoms, not its shape, and the flows of ended
operations are pruned (StateDB.prune). So the shape is rebuilt from the
operation's recorded plan with the factory that ran it, as a resume
rebuilds it: no copy of every flow is kept for the odd drawing. A
task's state comes from its persisted atom while the flow is there (the
operation runs, or ended since the last prune); after that from the
operation's record: every task of one that succeeded is done, one that
failed names the tasks that failed (``failed_tasks`` of its result),
and the other states are not known.
"""

from taskflow import exceptions as tf_exceptions
from taskflow import states as tf_states

from conductor import flow_store
from flows import context
from flows import deploy
from flows import move
from flows import teardown
from tenks import exceptions
from tenks import flow_graph
from tenks import states

FACTORIES = {'deploy': deploy.get_deploy_flow,
             'teardown': teardown.get_teardown_flow,
             'move': move.get_move_flow}

# Persisted atom states as a user reads them (see flow_graph.COLOURS);
# the store writes no RUNNING (conductor.flow_store): a task that runs
# is still pending there.
ATOM_STATES = {
    None: 'pending',
    tf_states.PENDING: 'pending',
    tf_states.RUNNING: 'running',
    tf_states.SUCCESS: 'done',
    tf_states.FAILURE: 'failed',
    tf_states.REVERTING: 'reverting',
    tf_states.REVERTED: 'reverted',
    tf_states.REVERT_FAILURE: 'failed',
}


def operation_graph(db, operation_id):
    """The graph of operation ``operation_id`` of the state database
    ``db`` (None: there is none yet), as flow_graph.describe gives it,
    with its tasks' states and the operation's 'id', 'kind', 'cluster'
    and 'state'. OperationNotFound; OperationHasNoFlow for one that
    built no flow."""
    operation = db and db.get_operation(operation_id)
    if operation is None:
        raise exceptions.OperationNotFound(id=operation_id)
    if operation.plan is None:
        raise exceptions.OperationHasNoFlow(
            id=operation_id, reason='it has not planned one yet'
            if operation.state == states.OPERATION_RUNNING else
            'it ended %s without one (it had nothing to change, or failed '
            'before its plan)' % operation.state)
    with context.reading(db):
        flow = FACTORIES[operation.kind](operation_id)
    graph = flow_graph.describe(flow)
    state_of = _task_states(db, operation)
    for node in graph['nodes']:
        if node['kind'] == 'task':
            node['state'] = state_of(node['name'])
    return dict(graph, id=operation.id, kind=operation.kind,
                cluster=operation.cluster, state=operation.state)


def _task_states(db, operation):
    """state_of(task name) -> its state, or None if not known."""
    atoms = _persisted_atoms(db, operation.id)
    if atoms is not None:
        return lambda name: (_atom_state(atoms[name]) if name in atoms
                             else 'pending')
    if operation.state == states.OPERATION_RUNNING:
        # Its flow is not saved yet.
        return lambda name: 'pending'
    if operation.state == states.OPERATION_SUCCEEDED:
        return lambda name: 'done'
    failed = set((operation.result or {}).get('failed_tasks', ()))
    return lambda name: 'failed' if name in failed else None


def _persisted_atoms(db, operation_id):
    """{name: atom detail} of the operation's saved flow, or None."""
    try:
        book = flow_store.Backend(db.engine).get_connection().get_logbook(
            operation_id)
    except tf_exceptions.NotFound:
        return None
    flow_detail = next(iter(book), None)
    return None if flow_detail is None else {
        atom.name: atom for atom in flow_detail}


def _atom_state(atom):
    if atom.state == tf_states.REVERTED and atom.failure is not None:
        # Its failure began the rollback.
        return 'failed'
    return ATOM_STATES.get(atom.state, 'pending')

