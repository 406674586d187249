"""``tenks operation list|show``."""

from tenks.cli import base
from tenks.cli import client
from tenks.cli import columns
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
