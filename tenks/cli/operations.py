"""``tenks operation list|show|graph``."""

import shutil
import subprocess

from tenks import exceptions
from tenks import flow_graph
from tenks.cli import base
from tenks.cli import client
from tenks.cli import columns
from tenks.cli.base import Command
from tenks.cli.base import Lister
from tenks.cli.base import ShowOne

OPERATION_COLUMNS = ('id', 'cluster', 'kind', 'state', 'progress',
                     'conductor', 'created_at', 'finished_at', 'error')


def operation_row(operation):
    row = dict(operation,
               progress=columns.ProgressColumn(operation['progress']))
    return tuple(row[c] for c in OPERATION_COLUMNS)


class OperationShow(ShowOne):
    """Show an operation: state, progress per stage, error."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('operation', help='Operation id.')
        parser.add_argument('--follow', action='store_true',
                            help='Show its progress until it ends (as '
                                 'deploy does), then the operation.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, read_only=True) as tenks:
            operation = tenks.get_operation(args.operation)
            if args.follow:
                operation = base.follow(self.app, tenks, args.operation)
        return OPERATION_COLUMNS, operation_row(operation)


class OperationList(Lister):
    """List operations, oldest first."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--cluster', help='Only this cluster\'s.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, read_only=True) as tenks:
            operations = tenks.list_operations(args.cluster)
        return OPERATION_COLUMNS, [operation_row(o) for o in operations]


class OperationGraph(Command):
    """Write an operation's flow as a Graphviz graph, each task with its
    state."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('operation', help='Operation id.')
        parser.add_argument('-o', '--output', metavar='FILE',
                            help='Write it to FILE (default: stdout).')
        parser.add_argument(
            '--format', dest='graph_format', choices=('dot', 'svg'),
            default='dot',
            help='dot (default), or svg drawn by Graphviz\'s dot program.')
        return parser

    def take_action(self, args):
        # Before asking: a missing program fails at once.
        program = svg_program() if args.graph_format == 'svg' else None
        with client.connect(self.app.conf, read_only=True) as tenks:
            graph = tenks.get_operation_graph(args.operation)
        text = flow_graph.dot(graph, '%s %s of cluster %s: %s' % (
            graph['kind'], graph['id'], graph['cluster'], graph['state']))
        data = text.encode() if program is None else svg(program, text)
        if args.output:
            with open(args.output, 'wb') as output:
                output.write(data)
        else:
            self.app.stdout.write(data.decode())


def svg_program():
    """The path of Graphviz's dot; GraphError if it is not installed."""
    program = shutil.which('dot')
    if program is None:
        raise exceptions.GraphError(
            format='svg', reason='Graphviz\'s "dot" program is not on PATH: '
            'install graphviz, or write --format dot and draw it elsewhere')
    return program


def svg(program, text):
    drawn = subprocess.run([program, '-Tsvg'], input=text.encode(),
                           capture_output=True, check=False)
    if drawn.returncode:
        raise exceptions.GraphError(format='svg', reason='%s exited %d: %s'
                                    % (program, drawn.returncode,
                                       drawn.stderr.decode().strip()))
    return drawn.stdout
