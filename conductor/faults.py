"""Faults injected into the flows a conductor runs, for the fault suite.

Off unless a test installs a Fault here (``install``) or the process
starts with ``TENKS_FAULT`` set (the tests and tools/fault_matrix.py
start ``tenks`` and ``tenks-conductor`` so): the runner arms the active
fault on every flow it runs. ``TENKS_FAULT`` holds one or both of,
comma-separated:

- ``fail:<pattern>``: the first task whose name matches the fnmatch
  pattern fails: the first answer a hostagent gives it is replaced by
  InjectedFault (what the request did is done), or, for a task that asks
  no hostagent, its result is.
- ``kill:<k>``: the process is killed (SIGKILL) once k tasks of a flow
  have ended, done or reverted; 0: before the first runs.
- ``kill:<pattern>``: the process is killed once the first task whose
  name matches the fnmatch pattern has succeeded, in a flow run from its
  start: a conductor that takes the flow over and resumes it finishes it.
"""

import fnmatch
import functools
import itertools
import os
import signal
import threading

import networkx
from taskflow import states

from flows import context
from tenks import exceptions

ENV = 'TENKS_FAULT'
# Atom states that end a task: a boundary.
ENDS = (states.SUCCESS, states.REVERTED)

_installed = None
# (value of TENKS_FAULT, its Fault): a fault fires once per process.
_from_env = (None, None)


class InjectedFault(exceptions.HostAgentError):
    msg_fmt = 'Injected fault: %(what)s'


def kill():
    os.kill(os.getpid(), signal.SIGKILL)


class Fault:
    """``fail``: the pattern of the task that fails; ``at``: how many
    task ends (see module doc) call ``action`` (default: kill).

    A Fault with neither only notes each flow's tasks (``tasks``)."""

    def __init__(self, fail=None, at=None, action=kill, after=None):
        """``after``: the pattern of the task whose success calls
        ``action``, in flows that are not resumed."""
        self.fail = fail
        self.at = at
        self.after = after
        self.action = action
        # The names of the tasks of the last flow armed, in an order
        # they may run in.
        self.tasks = []
        self.failed = None
        self._lock = threading.Lock()

    def arm(self, engine, resumed=False):
        """Set the fault on ``engine``'s compiled and prepared flow;
        ``resumed``: it was interrupted before."""
        graph = engine.compilation.execution_graph
        tasks = [node for node in networkx.lexicographical_topological_sort(
            graph, key=lambda node: node.name)
            if graph.nodes[node]['kind'] == 'task']
        self.tasks = [task.name for task in tasks]
        if self.fail is not None:
            for task in tasks:
                if fnmatch.fnmatchcase(task.name, self.fail):
                    task.execute = functools.partial(
                        self._failing, task.name, task.execute)
        if self.at is not None:
            ended = itertools.count(1)

            def on_atom(state, details):
                if state in ENDS and next(ended) == self.at:
                    self.action()

            engine.atom_notifier.register(engine.atom_notifier.ANY, on_atom)
            if self.at == 0:
                self.action()
        if self.after is not None and not resumed:
            def on_success(state, details):
                if state == states.SUCCESS and fnmatch.fnmatchcase(
                        details['task_name'], self.after):
                    self.action()

            engine.atom_notifier.register(engine.atom_notifier.ANY,
                                          on_success)

    def _take(self, name):
        """Whether task ``name`` gets the failure (the first to ask)."""
        with self._lock:
            if self.failed is None:
                self.failed = name
                return True
            return False

    def _failing(self, name, execute, *args, **kwargs):
        if self.failed is not None:
            return execute(*args, **kwargs)
        agents = _FailingAgents(self, name, context.get().agents)
        with context.replaced(agents=agents):
            result = execute(*args, **kwargs)
        if not agents.asked and self._take(name):
            raise InjectedFault(what='the result of task %s replaced'
                                % name)
        return result


class _FailingAgents:
    """A task's hostagent client whose first answer becomes an error."""

    def __init__(self, fault, task, agents):
        self.fault = fault
        self.task = task
        self.agents = agents
        self.asked = False

    def request(self, host, method, *args, **kwargs):
        result = self.agents.request(host, method, *args, **kwargs)
        self.asked = True
        if self.fault._take(self.task):
            raise InjectedFault(what='the answer of %s to %s of task %s '
                                'replaced' % (host, method, self.task))
        return result

    def request_all(self, host, method, calls, answered=None, **kwargs):
        # The first good answer to come is replaced as it comes, so that
        # the caller's ``answered`` (the operation's progress) sees the
        # error the task gets, not the answer it replaces.
        replaced, good = {}, []

        def replace(i, answer):
            if not isinstance(answer, Exception) and not good:
                good.append(i)
                if self.fault._take(self.task):
                    answer = replaced[i] = InjectedFault(
                        what='the answer of %s to %s (request %s) of task '
                        '%s replaced' % (host, method, calls[i][0],
                                         self.task))
            if answered is not None:
                answered(i, answer)

        answers = self.agents.request_all(host, method, calls,
                                          answered=replace, **kwargs)
        self.asked = True
        for i, error in replaced.items():
            answers[i] = error
        return answers


def parse(value):
    """The Fault a TENKS_FAULT value describes; ValueError if none."""
    options = {}
    for part in value.split(','):
        kind, _, argument = part.strip().partition(':')
        if kind == 'fail' and argument:
            options['fail'] = argument
        elif kind == 'kill' and argument.isdigit():
            options['at'] = int(argument)
        elif kind == 'kill' and argument:
            options['after'] = argument
        else:
            raise ValueError('%s: %r is not fail:<task pattern>, '
                             'kill:<task ends> or kill:<task pattern>'
                             % (ENV, part))
    return Fault(**options)


def install(fault):
    """Make ``fault`` (None: none) this process's active fault."""
    global _installed
    _installed = fault


def active():
    """The installed fault, else TENKS_FAULT's, else None."""
    global _from_env
    if _installed is not None:
        return _installed
    value = os.environ.get(ENV)
    if not value:
        return None
    if _from_env[0] != value:
        _from_env = (value, parse(value))
    return _from_env[1]
