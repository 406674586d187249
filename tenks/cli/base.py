"""What the commands of the ``tenks`` CLI share: cliff's command bases
without the package lookup for their epilog, and starting an operation
then following it to its end.

``-f json|yaml`` prints data: lists as lists, mappings as mappings
(see tenks.cli.columns).
"""

import json
import logging
import time

from cliff import command
from cliff import lister
from cliff import show

from tenks import exceptions
from tenks import states
from tenks.cli import client

# The standard library's logging, which cliff sets up: oslo.log would
# bring oslo.config into the CLI's start-up (test_cli_startup).
LOG = logging.getLogger(__name__)


class OwnEpilog:
    """cliff looks for the package that provides a command (reading the
    metadata of every installed package, a tenth of a second) to name it
    in the help; Tenks' commands are all its own."""

    def get_epilog(self):
        return '\n\n'.join([self._epilog or ''] + [
            epilog for hook in self._hooks
            if hook.obj is not None
            and (epilog := hook.obj.get_epilog()) is not None])


class Command(OwnEpilog, command.Command):
    pass


class Lister(OwnEpilog, lister.Lister):
    pass


class ShowOne(OwnEpilog, show.ShowOne):
    pass


def follow(app, tenks, operation_id, patience=client.RECONNECT_TIMEOUT):
    """The operation once ended, followed on stderr: live in a terminal,
    plain lines when piped or with -q."""
    from tenks.cli import progress
    with progress.view(app.stderr, operation_id,
                       plain=app.options.quiet) as shown:
        return tenks.wait(operation_id, patience, shown.notice,
                          on_update=shown.update)


def add_result_format(parser):
    """``-f text|json`` for a command that runs one operation: json
    prints the ended operation's record, for programs (the Ansible
    module) to read."""
    parser.add_argument(
        '-f', '--format', dest='result_format', choices=('text', 'json'),
        default='text',
        help='text: a line for people (default); json: the ended '
             'operation\'s record (id, state, result with its changed '
             'tasks and warnings, error), also when it failed; with '
             '--no-wait, {"id": ...}.')


class OperationCommand(Command):
    """Starts an operation, and by default follows it to its end."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        wait = parser.add_mutually_exclusive_group()
        wait.add_argument('--wait', dest='wait', action='store_true',
                          default=True,
                          help='Follow the operation to its end (default).')
        wait.add_argument('--no-wait', dest='wait', action='store_false',
                          help='Print the operation id and return.')
        parser.add_argument(
            '--reconnect-timeout', type=float, metavar='SECONDS',
            default=client.RECONNECT_TIMEOUT,
            help='Following it over the bus, how long to keep asking a '
                 'conductor (or broker) that does not answer before giving '
                 'up (default %d); a restarted conductor goes on with the '
                 'same operation.' % client.RECONNECT_TIMEOUT)
        return parser

    def wait(self, tenks, operation_id, args):
        """The operation ``operation_id`` once ended, its progress shown
        on stderr (see tenks.cli.progress), with what following it over
        the bus meets."""
        LOG.info('Following operation %s', operation_id)
        return follow(self.app, tenks, operation_id,
                      args.reconnect_timeout)

    def run_operation(self, args, start, describe, source=None):
        """``start(client)`` -> operation id; ``describe(operation, s)``
        -> the line to print once it succeeded. A failure names
        ``source`` (the spec file), whose fields its error may name.
        ``args.result_format`` (see add_result_format) says how."""
        as_json = args.result_format == 'json'
        started = time.monotonic()
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            operation_id = start(tenks)
            if not args.wait:
                self.app.stdout.write((json.dumps({'id': operation_id})
                                       if as_json else operation_id) + '\n')
                return
            operation = self.wait(tenks, operation_id, args)
        if as_json:
            self.app.stdout.write(json.dumps(operation, indent=2) + '\n')
        if operation['state'] != states.OPERATION_SUCCEEDED:
            error = operation['error'] or 'operation %s ended %s' % (
                operation_id, operation['state'])
            raise exceptions.OperationFailed(
                '%s: %s' % (source, error) if source else error)
        for warning in operation['result'].get('warnings', []):
            self.app.stderr.write('Warning: %s\n' % warning)
        if as_json:
            return
        if operation['result'].get('resumed'):
            self.app.stdout.write(
                'Resumed deploy %s, interrupted earlier.\n' % operation_id)
        self.app.stdout.write(
            describe(operation, time.monotonic() - started) + '\n')
