"""Commands of the ``tenks`` CLI."""

import json
import os
import time

from cliff import command
from cliff import lister
from cliff import show

from tenks import exceptions
from tenks import spec as tenks_spec
from tenks.cli import client

NODE_COLUMNS = ('name', 'uuid', 'cluster', 'hypervisor', 'domain', 'vcpus',
                'memory_mb', 'macs', 'bmc_type', 'bmc_address', 'bmc_port',
                'state')
OPERATION_COLUMNS = ('id', 'cluster', 'kind', 'state', 'progress',
                     'conductor', 'created_at', 'finished_at', 'error')
HYPERVISOR_COLUMNS = ('host', 'state', 'nodes', 'last_seen', 'cpus',
                      'memory_mb', 'libvirt_version', 'ipmi_address',
                      'physnet_mappings')
EVENT_COLUMNS = ('timestamp', 'event_type', 'priority', 'payload')


def progress_text(progress):
    return ', '.join('%s %d/%d' % (stage, done, total)
                     for stage, (done, total) in sorted(progress.items()))


def operation_row(operation):
    row = dict(operation, progress=progress_text(operation['progress']))
    return tuple(row[c] for c in OPERATION_COLUMNS)


def hypervisor_row(hypervisor):
    facts = hypervisor['facts']
    return (hypervisor['host'], hypervisor['state'], hypervisor['nodes'],
            hypervisor['last_seen'], facts.get('cpus'),
            facts.get('memory_mb'), facts.get('libvirt_version'),
            facts.get('ipmi_address'),
            json.dumps(facts.get('physnet_mappings', {})))


class OperationCommand(command.Command):
    """Starts an operation, and by default follows it to its end."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        wait = parser.add_mutually_exclusive_group()
        wait.add_argument('--wait', dest='wait', action='store_true',
                          default=True,
                          help='Follow the operation to its end (default).')
        wait.add_argument('--no-wait', dest='wait', action='store_false',
                          help='Print the operation id and return.')
        return parser

    def run_operation(self, args, start, describe):
        """``start(client)`` -> operation id; ``describe(operation, s)``
        -> the line to print once it succeeded."""
        started = time.monotonic()
        with client.connect(self.app.conf) as tenks:
            operation_id = start(tenks)
            if not args.wait:
                self.app.stdout.write(operation_id + '\n')
                return
            operation = tenks.wait(operation_id)
        if operation['state'] != 'succeeded':
            raise exceptions.OperationFailed(operation['error'])
        for warning in operation['result'].get('warnings', []):
            self.app.stderr.write('Warning: %s\n' % warning)
        if operation['result'].get('resumed'):
            self.app.stdout.write(
                'Resumed deploy %s, interrupted earlier.\n' % operation_id)
        self.app.stdout.write(
            describe(operation, time.monotonic() - started) + '\n')


class Deploy(OperationCommand):
    """Deploy the cluster a spec describes (idempotent)."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('spec', help='Cluster spec (YAML file).')
        return parser

    def take_action(self, args):
        spec = tenks_spec.load(args.spec)
        count = sum(s['count'] for s in spec['specs'])

        def describe(operation, elapsed):
            changed = len(operation['result']['changed'])
            if changed:
                return ('Cluster %s deployed: %d node(s), %d change(s) in '
                        '%.2f s.' % (spec['cluster'], count, changed,
                                     elapsed))
            return ('Cluster %s is already deployed as specified: nothing '
                    'changed in %.2f s.' % (spec['cluster'], elapsed))

        self.run_operation(args, lambda tenks: tenks.deploy(spec), describe)


class Teardown(OperationCommand):
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

        def describe(operation, elapsed):
            return ('Cluster %s torn down: %d resource(s) removed in %.2f s.'
                    % (name, len(operation['result']['changed']), elapsed))

        self.run_operation(args, lambda tenks: tenks.teardown(name),
                           describe)


class NodeList(lister.Lister):
    """List the nodes of every cluster, or of one."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--cluster', help='Only this cluster\'s nodes.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf) as tenks:
            nodes = tenks.list_nodes(args.cluster)
        return NODE_COLUMNS, [
            (n['name'], n['uuid'], n['cluster'], n['hypervisor'], n['name'],
             n['vcpus'], n['memory_mb'],
             ','.join(nic['mac'] for nic in n['nics']), n['bmc_type'],
             n['bmc_address'], n['bmc_port'], n['state'])
            for n in nodes]


class ClusterList(lister.Lister):
    """List the clusters."""

    def take_action(self, args):
        with client.connect(self.app.conf) as tenks:
            clusters = tenks.list_clusters()
        columns = ('name', 'state', 'created_at', 'updated_at')
        return columns, [tuple(c[k] for k in columns) for c in clusters]


class OperationShow(show.ShowOne):
    """Show an operation: state, progress per stage, error."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('operation', help='Operation id.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf) as tenks:
            operation = tenks.get_operation(args.operation)
        return OPERATION_COLUMNS, operation_row(operation)


class OperationList(lister.Lister):
    """List operations, oldest first."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--cluster', help='Only this cluster\'s.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf) as tenks:
            operations = tenks.list_operations(args.cluster)
        return OPERATION_COLUMNS, [operation_row(o) for o in operations]


class HypervisorList(lister.Lister):
    """List the hypervisors whose hostagents registered."""

    def take_action(self, args):
        with client.connect(self.app.conf) as tenks:
            hypervisors = tenks.list_hypervisors()
        return HYPERVISOR_COLUMNS, [hypervisor_row(h) for h in hypervisors]


class HypervisorShow(show.ShowOne):
    """Show a hypervisor: state, facts and how many nodes it hosts."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('host', help='Host name of the hypervisor.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf) as tenks:
            hypervisor = tenks.get_hypervisor(args.host)
        return HYPERVISOR_COLUMNS, hypervisor_row(hypervisor)


class HypervisorDelete(command.Command):
    """Forget a hypervisor whose hostagent is down and that hosts nothing."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('host', help='Host name of the hypervisor.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf) as tenks:
            tenks.delete_hypervisor(args.host)
        self.app.stdout.write('Hypervisor %s deleted.\n' % args.host)


class Events(lister.Lister):
    """Show lifecycle events; --follow prints them as they happen."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--cluster', help='Only this cluster\'s.')
        parser.add_argument('--limit', type=int, default=100,
                            help='How many of the latest (default 100).')
        parser.add_argument('--follow', action='store_true',
                            help='Then print new events until interrupted '
                                 '(needs a running conductor).')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf) as tenks:
            events = tenks.list_events(args.cluster, args.limit)
            if args.follow:
                write = self._writer(args.cluster)
                for event in events:
                    write(event)
                tenks.follow_events(write)
        return EVENT_COLUMNS, [
            tuple(e[c] if c != 'payload' else json.dumps(e[c])
                  for c in EVENT_COLUMNS) for e in events]

    def _writer(self, cluster):
        def write(event):
            if cluster and event['payload'].get('cluster') != cluster:
                return
            self.app.stdout.write('%s %s %s\n' % (
                event['timestamp'], event['event_type'],
                json.dumps(event['payload'], sort_keys=True)))
            self.app.stdout.flush()
        return write
