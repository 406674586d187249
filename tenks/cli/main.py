"""The ``tenks`` command.

Start-up matters here: ``tenks --version``, ``--help`` and the commands
that only read import neither the conductor nor TaskFlow, SQLAlchemy or
oslo.messaging. Modules of the CLI import what is heavy where it is
used; tests/unit/test_cli_startup.py keeps it so.
"""

import inspect
import logging
import os
import sys

from cliff import app
from cliff import commandmanager
from cliff import help as cliff_help

import tenks
from tenks import runtime


class TenksApp(app.App):

    # Warnings and errors only; -v shows progress, -vv debug.
    DEFAULT_VERBOSE_LEVEL = 0

    def __init__(self, exits=False):
        # Whether the process exits after the command (console_main).
        self.exits = exits
        super().__init__(
            description='Virtual bare metal clusters for OpenStack Ironic.',
            version=tenks.__version__,
            command_manager=commandmanager.CommandManager('tenks.cli'),
            deferred_help=True)
        self._conf = None

    def configure_logging(self):
        super().configure_logging()
        # cliff sets the root logger to DEBUG and filters in its handlers,
        # so every library's debug call built a record nobody shows (7 %
        # of the CPU of a 1,000-node teardown): the root logger takes the
        # lowest level a handler shows instead.
        root = logging.getLogger()
        root.setLevel(min(handler.level or logging.DEBUG
                          for handler in root.handlers))

    def build_option_parser(self, description, version, argparse_kwargs=None):
        parser = super().build_option_parser(
            description, version,
            dict(argparse_kwargs or {}, conflict_handler='resolve'))
        # cliff's -q sets the verbosity Tenks has by default; here it
        # also turns an operation's live view into plain lines.
        parser.add_argument(
            '-q', '--quiet', action='store_true',
            help='Warnings and errors only, and an operation\'s progress '
                 'as plain lines, not a live view.')
        parser.add_argument(
            '--state-dir',
            help='Directory of the state database and the daemons Tenks '
                 'runs (default: $TENKS_STATE_DIR, else /var/lib/tenks '
                 'for root, ~/.local/state/tenks for others).')
        parser.add_argument(
            '--config-file', action='append', default=[],
            help='oslo.config file with service options (may repeat).')
        parser.add_argument(
            '--os-cloud', metavar='CLOUD',
            help='Cloud of clouds.yaml to enrol nodes in: sets [openstack] '
                 'cloud, so it wins over the config file and over OS_CLOUD '
                 '(used embedded; a running conductor uses its own).')
        return parser

    def print_help_if_requested(self):
        """``tenks --help``: the options, then each command's summary.

        cliff's own listing names the distribution of every command,
        which reads the metadata of every installed package (half the
        time of ``tenks --help``), and builds every command to ask for
        its description; Tenks' commands are all its own, and their
        summary is the first line of their docstring.
        """
        if not self.options.deferred_help:
            return
        self.parser.print_help(self.stdout)
        self.stdout.write('\nCommands:\n')
        for name, entry_point in sorted(self.command_manager):
            summary = (inspect.getdoc(entry_point.load()) or '').split(
                '\n')[0].rstrip('.')
            self.stdout.write('  %-18s %s\n' % (name, summary))
        raise cliff_help.HelpExit()

    @property
    def conf(self):
        """The service options, parsed when a command first needs them
        (oslo.config costs a tenth of a second to import)."""
        if self._conf is None:
            self._conf = self.load_conf()
        return self._conf

    def load_conf(self):
        from tenks import conf as tenks_conf
        conf = tenks_conf.new_conf()
        args = []
        for path in self.options.config_file:
            args += ['--config-file', path]
        conf(args, project='tenks', default_config_files=[])
        conf.set_override('state_dir', self.options.state_dir
                          or tenks_conf.default_state_dir())
        if self.options.os_cloud:
            conf.set_override('cloud', self.options.os_cloud,
                              group='openstack')
        return conf


def main(argv=None, exits=False):
    # oslo.service's backend is chosen where the bus is first used
    # (tenks.rpc): --version and the read-only commands never load it.
    runtime.hide_eventlet()
    return TenksApp(exits).run(sys.argv[1:] if argv is None else argv)


def console_main():
    """The ``tenks`` command: main(), then a quick exit.

    Tearing down the interpreter (some 1,500 modules, idle worker
    threads joined one by one) takes a third of a second after the
    command is done; by then every transaction is committed and the
    daemons Tenks runs are detached, so flush the output and go.
    """
    code = main(exits=True)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == '__main__':
    console_main()
