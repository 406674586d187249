"""Commands of the ``tenks`` CLI."""

import os
import time

from cliff import command
from cliff import lister

from tenks import embedded
from tenks import spec as tenks_spec
from tenks.db import api as db_api

NODE_COLUMNS = ('name', 'uuid', 'cluster', 'hypervisor', 'domain', 'vcpus',
                'memory_mb', 'macs', 'bmc_type', 'bmc_address', 'bmc_port',
                'state')


class Deploy(command.Command):
    """Deploy the cluster a spec describes (idempotent)."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('spec', help='Cluster spec (YAML file).')
        return parser

    def take_action(self, args):
        spec = tenks_spec.load(args.spec)
        started = time.monotonic()
        with embedded.embedded(self.app.conf) as conductor:
            result = conductor.deploy(spec)
        elapsed = time.monotonic() - started
        count = sum(s['count'] for s in spec['specs'])
        if result['resumed']:
            self.app.stdout.write(
                'Resumed deploy %s, interrupted earlier.\n'
                % result['operation'])
        if result['changed']:
            self.app.stdout.write(
                'Cluster %s deployed: %d node(s), %d change(s) in %.2f s.\n'
                % (spec['cluster'], count, len(result['changed']), elapsed))
        else:
            self.app.stdout.write(
                'Cluster %s is already deployed as specified: nothing '
                'changed in %.2f s.\n' % (spec['cluster'], elapsed))


class Teardown(command.Command):
    """Remove everything a cluster's deploy created."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('cluster',
                            help='Cluster spec (YAML file) or cluster name.')
        return parser

    def take_action(self, args):
        name = args.cluster
        if os.path.isfile(name):
            name = tenks_spec.load(name)['cluster']
        started = time.monotonic()
        with embedded.embedded(self.app.conf) as conductor:
            result = conductor.teardown(name)
        self.app.stdout.write(
            'Cluster %s torn down: %d resource(s) removed in %.2f s.\n'
            % (name, len(result['changed']), time.monotonic() - started))


class NodeList(lister.Lister):
    """List the nodes of every cluster, or of one."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--cluster', help='Only this cluster\'s nodes.')
        return parser

    def take_action(self, args):
        state_dir = self.app.conf.state_dir
        if not os.path.exists(os.path.join(state_dir, 'state.sqlite')):
            return NODE_COLUMNS, []
        db = db_api.StateDB(db_api.create_engine(
            self.app.conf.conductor.database_connection
            or db_api.default_url(state_dir)))
        rows = []
        for node in db.list_nodes(cluster=args.cluster):
            rows.append((node.name, node.uuid, node.cluster, node.hypervisor,
                         node.name, node.vcpus, node.memory_mb,
                         ','.join(nic['mac'] for nic in node.nics),
                         node.bmc_type, node.bmc_address, node.bmc_port,
                         node.state))
        return NODE_COLUMNS, rows
