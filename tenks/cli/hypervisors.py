"""``tenks hypervisor ...``: list, show, set, delete, and maintenance
start|stop."""

import time

from tenks import exceptions
from tenks import states
from tenks.cli import client
from tenks.cli import columns
from tenks.cli.base import Command
from tenks.cli.base import Lister
from tenks.cli.base import OperationCommand
from tenks.cli.base import ShowOne

HYPERVISOR_COLUMNS = ('host', 'state', 'nodes', 'last_seen', 'cpus',
                      'memory_mb', 'libvirt_version', 'ipmi_address',
                      'physnet_mappings')
HYPERVISOR_SHOW_COLUMNS = HYPERVISOR_COLUMNS + (
    'enabled', 'disabled_reason', 'availability_zone', 'aggregates',
    'traits', 'inventory', 'usage', 'allocations')
INVENTORY_FIELDS = ('total', 'reserved', 'allocation_ratio', 'min_unit',
                    'max_unit', 'step_size', 'used')


def hypervisor_row(hypervisor):
    facts = hypervisor['facts']
    return (hypervisor['host'], hypervisor['state'], hypervisor['nodes'],
            hypervisor['last_seen'], facts.get('cpus'),
            facts.get('memory_mb'), facts.get('libvirt_version'),
            facts.get('ipmi_address'),
            columns.DictColumn(facts.get('physnet_mappings', {})))


class HypervisorList(Lister):
    """List the hypervisors whose hostagents registered."""

    def take_action(self, args):
        # Not read-only in embedded mode: the local hostagent registers
        # with its current facts.
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            hypervisors = tenks.list_hypervisors()
        return HYPERVISOR_COLUMNS, [hypervisor_row(h) for h in hypervisors]


class HypervisorShow(ShowOne):
    """Show a hypervisor: state, facts, nodes, and its resource provider
    (inventory, usage, each node's allocations, traits, aggregates)."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('host', help='Host name of the hypervisor.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            hypervisor = tenks.get_hypervisor(args.host)
        return HYPERVISOR_SHOW_COLUMNS, hypervisor_show_row(hypervisor)


class HypervisorInventory(columns.ListColumn):
    """Inventories as ``openstack resource provider inventory list``
    shows them: a line per resource class, with what is used of it."""

    def human_readable(self):
        return '\n'.join('%s: %s' % (row['resource_class'], ', '.join(
            '%s=%s' % (field, row[field]) for field in INVENTORY_FIELDS))
            for row in self._value)


def hypervisor_show_row(hypervisor):
    inventory = [dict(fields, resource_class=rc) for rc, fields in
                 hypervisor['inventories'].items()]
    allocations = [dict(allocation, consumer=uuid) for uuid, allocation
                   in sorted(hypervisor['allocations'].items(),
                             key=lambda item: item[1]['name'])]
    return hypervisor_row(hypervisor) + (
        hypervisor['enabled'], hypervisor.get('disabled_reason'),
        hypervisor['availability_zone'],
        columns.ListColumn(hypervisor['aggregates']),
        columns.ListColumn(hypervisor['traits']),
        HypervisorInventory(inventory),
        columns.DictColumn(hypervisor['usages']),
        AllocationsColumn(allocations))


class AllocationsColumn(columns.ListColumn):
    """Each consumer (node) and what it is allocated."""

    def human_readable(self):
        return '\n'.join('%s (%s, cluster %s): %s' % (
            row['name'], row['consumer'], row['cluster'],
            columns.DictColumn(row['resources']).human_readable())
            for row in self._value)


class HypervisorSet(Command):
    """Enable or disable a hypervisor: a disabled one takes no new node."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument('--enable', dest='enabled', action='store_true',
                           default=None, help='Let it take new nodes.')
        group.add_argument('--disable', dest='enabled',
                           action='store_false',
                           help='Give it no new node (its nodes stay).')
        parser.add_argument('--reason', help='Why it is disabled.')
        parser.add_argument('host', help='Host name of the hypervisor.')
        return parser

    def take_action(self, args):
        if args.enabled and args.reason:
            raise exceptions.ConfigError(
                reason='--reason goes with --disable')
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            tenks.update_hypervisor(args.host, args.enabled, args.reason)


def moved_nodes(result):
    """How many nodes a move operation that succeeded moved, as its
    ``result`` says. A conductor older than that count (a rolling
    upgrade) recorded a task named '<node>:retire' per node moved."""
    if 'moved' in result:
        return result['moved']
    return sum(1 for task in result['changed'] if task.endswith(':retire'))


class _Maintenance(OperationCommand):
    """Runs a maintenance call, then follows its move operations."""

    call = None

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('host', help='Host name of the hypervisor.')
        return parser

    def arguments(self, args):
        return ()

    def take_action(self, args):
        started = time.monotonic()
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            answer = getattr(tenks, self.call)(args.host,
                                               *self.arguments(args))
            operations = answer['operations']
            if not args.wait:
                for operation_id in operations:
                    self.app.stdout.write(operation_id + '\n')
            else:
                operations = [self.wait(tenks, o, args) for o in operations]
        failed = list(answer['refused'].items())
        for operation in operations if args.wait else ():
            for warning in operation['result'].get('warnings', []) if (
                    operation['result']) else ():
                self.app.stderr.write('Warning: %s\n' % warning)
            if operation['state'] != states.OPERATION_SUCCEEDED:
                failed.append((operation['cluster'], operation['error']))
        if failed:
            raise exceptions.OperationFailed('; '.join(
                'cluster %s: %s' % item for item in failed))
        if args.wait:
            moved = sum(moved_nodes(o['result']) for o in operations)
            self.app.stdout.write(self.done % (
                args.host, moved, time.monotonic() - started) + '\n')


class MaintenanceStart(_Maintenance):
    """Put a hypervisor into maintenance: disable it and move its nodes
    to other enabled hypervisors of its aggregates."""

    call = 'start_host_maintenance'
    done = 'Hypervisor %s in maintenance: %d node(s) moved in %.2f s.'

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--reason', help='Why it is in maintenance.')
        return parser

    def arguments(self, args):
        return (args.reason,)


class MaintenanceStop(_Maintenance):
    """Take a hypervisor out of maintenance (enable it); with
    --rebalance, move nodes back to it."""

    call = 'stop_host_maintenance'
    done = 'Hypervisor %s out of maintenance: %d node(s) moved in %.2f s.'

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument(
            '--rebalance', action='store_true',
            help='Move nodes of the other enabled hypervisors of its '
                 'aggregates to it until they differ by one node at most.')
        return parser

    def arguments(self, args):
        return (args.rebalance,)


class HypervisorDelete(Command):
    """Forget a hypervisor whose hostagent is down and that hosts nothing."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('host', help='Host name of the hypervisor.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            tenks.delete_hypervisor(args.host)
        self.app.stdout.write('Hypervisor %s deleted.\n' % args.host)
