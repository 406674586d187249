"""The ``tenks`` command."""

import logging
import os
import sys
import warnings

from cliff import app
from cliff import commandmanager

import tenks
from tenks import conf as tenks_conf


class TenksApp(app.App):

    # Warnings and errors only; -v shows progress, -vv debug.
    DEFAULT_VERBOSE_LEVEL = 0

    def __init__(self):
        super().__init__(
            description='Virtual bare metal clusters for OpenStack Ironic.',
            version=tenks.__version__,
            command_manager=commandmanager.CommandManager('tenks.cli'),
            deferred_help=True)
        self.conf = None

    def build_option_parser(self, description, version, argparse_kwargs=None):
        parser = super().build_option_parser(description, version,
                                             argparse_kwargs)
        parser.add_argument(
            '--state-dir', default=tenks_conf.default_state_dir(),
            help='Directory of the state database and the daemons Tenks '
                 'runs (env %s; default: %%(default)s).'
                 % tenks_conf.STATE_DIR_ENV)
        parser.add_argument(
            '--config-file', action='append', default=[],
            help='oslo.config file with service options (may repeat).')
        parser.add_argument(
            '--os-cloud', metavar='CLOUD',
            help='Cloud of clouds.yaml to enrol nodes in: sets [openstack] '
                 'cloud, so it wins over the config file and over OS_CLOUD '
                 '(used embedded; a running conductor uses its own).')
        return parser

    def initialize_app(self, argv):
        # Imported here, after main() has filtered eventlet's warning.
        from tenks import rpc
        conf = tenks_conf.new_conf()
        rpc.register_opts(conf)
        args = []
        for path in self.options.config_file:
            args += ['--config-file', path]
        conf(args, project='tenks', default_config_files=[])
        conf.set_override('state_dir', self.options.state_dir)
        if self.options.os_cloud:
            conf.set_override('cloud', self.options.os_cloud,
                              group='openstack')
        self.conf = conf


def main(argv=None):
    # oslo.messaging and futurist import eventlet, which warns that it is
    # deprecated although Tenks never uses it.
    warnings.filterwarnings('ignore', message='(?s).*Eventlet is deprecated')
    return TenksApp().run(sys.argv[1:] if argv is None else argv)


def console_main():
    """The ``tenks`` command: main(), then a quick exit.

    Tearing down the interpreter (some 1,500 modules, idle worker
    threads joined one by one) takes a third of a second after the
    command is done; by then every transaction is committed and the
    daemons Tenks runs are detached, so flush the output and go.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == '__main__':
    console_main()
