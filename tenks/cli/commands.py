"""Commands of the ``tenks`` CLI.

``-f json|yaml`` prints data: lists as lists, mappings as mappings
(see tenks.cli.columns). The spec module (jsonschema, os-traits) is
imported by the commands that read specs, not by ``tenks --help``.
"""

import json
import logging
import os
import time

from cliff import command
from cliff import lister
from cliff import show

from tenks import exceptions
from tenks.cli import client
from tenks.cli import columns

LOG = logging.getLogger(__name__)

NODE_COLUMNS = ('name', 'uuid', 'cluster', 'hypervisor', 'domain', 'vcpus',
                'memory_mb', 'macs', 'bmc_type', 'bmc_address', 'bmc_port',
                'bmc_system_id', 'state')
NODE_SHOW_COLUMNS = ('name', 'uuid', 'cluster', 'hypervisor', 'domain',
                     'node_type', 'state', 'vcpus', 'memory_mb', 'volumes',
                     'nics', 'macs', 'bmc_type', 'bmc_address', 'bmc_port',
                     'bmc_system_id', 'boot_mode', 'secure_boot',
                     'console_log')
CLUSTER_COLUMNS = ('name', 'state', 'created_at', 'updated_at')
OPERATION_COLUMNS = ('id', 'cluster', 'kind', 'state', 'progress',
                     'conductor', 'created_at', 'finished_at', 'error')
HYPERVISOR_COLUMNS = ('host', 'state', 'nodes', 'last_seen', 'cpus',
                      'memory_mb', 'libvirt_version', 'ipmi_address',
                      'physnet_mappings')
HYPERVISOR_SHOW_COLUMNS = HYPERVISOR_COLUMNS + (
    'enabled', 'disabled_reason', 'availability_zone', 'aggregates',
    'traits', 'inventory', 'usage', 'allocations')
INVENTORY_FIELDS = ('total', 'reserved', 'allocation_ratio', 'min_unit',
                    'max_unit', 'step_size', 'used')
AGGREGATE_COLUMNS = ('id', 'name', 'availability_zone')
AGGREGATE_LONG_COLUMNS = AGGREGATE_COLUMNS + ('properties', 'hosts')
AGGREGATE_SHOW_COLUMNS = ('availability_zone', 'created_at', 'hosts', 'id',
                          'name', 'properties', 'updated_at', 'uuid')
EVENT_COLUMNS = ('timestamp', 'event_type', 'priority', 'payload')
PLAN_COLUMNS = ('node', 'hypervisor', 'resource', 'action', 'field', 'old',
                'new')
AUDIT_COLUMNS = ('hypervisor', 'kind', 'name', 'status', 'cluster', 'mark',
                 'detail')


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


def load_spec(path):
    from tenks import spec as tenks_spec
    return tenks_spec.load(path)


def node_row(node, fields=NODE_COLUMNS):
    row = dict(node, domain=node['name'],
               bmc_system_id=node.get('bmc_system_id'),
               macs=columns.ListColumn([nic['mac'] for nic in node['nics']]),
               nics=columns.ListColumn(node['nics']),
               volumes=columns.ListColumn(node['volumes']))
    return tuple(row[c] for c in fields)


def operation_row(operation):
    row = dict(operation,
               progress=columns.ProgressColumn(operation['progress']))
    return tuple(row[c] for c in OPERATION_COLUMNS)


def hypervisor_row(hypervisor):
    facts = hypervisor['facts']
    return (hypervisor['host'], hypervisor['state'], hypervisor['nodes'],
            hypervisor['last_seen'], facts.get('cpus'),
            facts.get('memory_mb'), facts.get('libvirt_version'),
            facts.get('ipmi_address'),
            columns.DictColumn(facts.get('physnet_mappings', {})))


def find_node(nodes, name_or_uuid, cluster=None):
    """The one node of ``nodes`` with this UUID or name."""
    found = [n for n in nodes if n['uuid'] == name_or_uuid]
    found = found or [n for n in nodes if n['name'] == name_or_uuid]
    if not found:
        raise exceptions.NodeNotFound(
            node=name_or_uuid,
            where=' in cluster %s' % cluster if cluster else '')
    if len(found) > 1:
        raise exceptions.NodeAmbiguous(
            node=name_or_uuid, count=len(found),
            matches=', '.join('cluster %s on %s' % (n['cluster'],
                                                    n['hypervisor'])
                              for n in found))
    return found[0]


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
        """The operation ``operation_id`` once ended; what following it
        over the bus meets is said on stderr."""
        def notice(text):
            self.app.stderr.write(text + '\n')
            self.app.stderr.flush()
        LOG.info('Following operation %s', operation_id)
        return tenks.wait(operation_id, args.reconnect_timeout, notice)

    def run_operation(self, args, start, describe, source=None):
        """``start(client)`` -> operation id; ``describe(operation, s)``
        -> the line to print once it succeeded. A failure names
        ``source`` (the spec file), whose fields its error may name."""
        started = time.monotonic()
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            operation_id = start(tenks)
            if not args.wait:
                self.app.stdout.write(operation_id + '\n')
                return
            operation = self.wait(tenks, operation_id, args)
        if operation['state'] != 'succeeded':
            error = operation['error'] or 'operation %s ended %s' % (
                operation_id, operation['state'])
            raise exceptions.OperationFailed(
                '%s: %s' % (source, error) if source else error)
        for warning in operation['result'].get('warnings', []):
            self.app.stderr.write('Warning: %s\n' % warning)
        if operation['result'].get('resumed'):
            self.app.stdout.write(
                'Resumed deploy %s, interrupted earlier.\n' % operation_id)
        self.app.stdout.write(
            describe(operation, time.monotonic() - started) + '\n')


def change_line(change):
    """One change of a plan, as text, e.g. 'tk0 domain: update memory_mb
    256 -> 384', 'tk2 volume tk2vol0: create capacity 1073741824'."""
    where = change['node'] or change['hypervisor'] or 'cloud'
    text = '%s %s: %s' % (where, change['resource'], change['action'])
    if change['action'] == 'repair':
        return '%s (%s)' % (text, change['old'])
    if change['field']:
        text += ' %s' % change['field']
    old, new = change['old'], change['new']
    if old is not None and new is not None:
        text += ' %s -> %s' % (_value(old), _value(new))
    elif old is not None or new is not None:
        text += ' %s' % _value(new if old is None else old)
    return text


def _value(value):
    return '-' if value is None else json.dumps(value) if isinstance(
        value, (dict, list)) else str(value)


def add_force(parser):
    parser.add_argument(
        '--force', action='store_true',
        help='Also resize nodes whose domain runs (powered off, changed, '
             'started again) and remove or resize nodes that Ironic has '
             'deployed.')


class Plan(Lister):
    """Show what deploying a spec would change, changing nothing."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('spec', help='Cluster spec (YAML file).')
        add_force(parser)
        return parser

    def take_action(self, args):
        spec = load_spec(args.spec)
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            plan = tenks.plan(spec, args.force)
        for note in plan.get('notes', ()):
            self.app.stderr.write('Note: %s.\n' % note)
        if not plan['changes'] and args.formatter == 'table':
            self.app.stderr.write('Cluster %s is as specified: nothing to '
                                  'change.\n' % spec['cluster'])
        if args.formatter != 'table':
            return PLAN_COLUMNS, [[change[c] for c in PLAN_COLUMNS]
                                  for change in plan['changes']]
        return PLAN_COLUMNS, [
            ['' if change[c] is None else _value(change[c])
             for c in PLAN_COLUMNS] for change in plan['changes']]


class Deploy(OperationCommand):
    """Deploy the cluster a spec describes, or change it to what the
    spec says now (idempotent). In a terminal, a plan that removes or
    replaces something is shown and must be confirmed first."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('spec', help='Cluster spec (YAML file).')
        add_force(parser)
        parser.add_argument('--yes', '-y', action='store_true',
                            help='Do not ask before removing or replacing '
                                 'anything.')
        return parser

    def take_action(self, args):
        spec = load_spec(args.spec)
        count = sum(s['count'] for s in spec['specs'])

        def start(tenks):
            if not args.yes and self.app.stdin.isatty():
                self.confirm(tenks, spec, args.force)
            return tenks.deploy(spec, args.force)

        def describe(operation, elapsed):
            changes = operation['result'].get('plan') or []
            lines = ['  ' + change_line(c) for c in changes]
            changed = len(operation['result']['changed'])
            if changed or changes:
                return '\n'.join(lines + [
                    'Cluster %s deployed: %d node(s), %d change(s) in '
                    '%.2f s.' % (spec['cluster'], count, len(changes),
                                 elapsed)])
            return ('Cluster %s is already deployed as specified: nothing '
                    'changed in %.2f s.' % (spec['cluster'], elapsed))

        self.run_operation(args, start, describe, source=args.spec)

    def confirm(self, tenks, spec, force):
        plan = tenks.plan(spec, force)
        if not plan['destructive']:
            return
        self.app.stdout.write('Deploying %s will:\n%s\n' % (
            spec['cluster'], '\n'.join('  ' + change_line(c)
                                        for c in plan['changes'])))
        self.app.stdout.write('It removes or replaces something. Apply? '
                              '[y/N] ')
        self.app.stdout.flush()
        if self.app.stdin.readline().strip().lower() not in ('y', 'yes'):
            raise exceptions.TenksError('Nothing was changed.')


class Teardown(OperationCommand):
    """Remove everything a cluster's deploy created."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('cluster',
                            help='Cluster spec (YAML file) or cluster name.')
        parser.add_argument(
            '--force', action='store_true',
            help='Also remove nodes that Ironic has deployed (Nova '
                 'servers on them); without it such a teardown is refused '
                 'before anything is removed.')
        return parser

    def take_action(self, args):
        name = args.cluster
        if os.path.isfile(name):
            name = load_spec(name)['cluster']

        def describe(operation, elapsed):
            # The tasks that removed something: one per node, one per
            # other thing (bridge, pool, flavor...).
            changed = operation['result']['changed']
            nodes = sum(1 for task in changed if task.startswith('remove:'))
            return ('Cluster %s torn down: %d node(s) and %d other '
                    'resource(s) removed in %.2f s.' % (
                        name, nodes, len(changed) - nodes, elapsed))

        self.run_operation(
            args, lambda tenks: tenks.teardown(name, args.force), describe)


class Audit(Lister):
    """Compare the records with what the hypervisors and the cloud hold
    (exit 1 on drift); --clean removes what dead deployments left."""

    drift = ()

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument(
            'cluster', nargs='?',
            help='Only this cluster: its records, and what carries a mark '
                 'naming it.')
        parser.add_argument(
            '--clean', action='store_true',
            help='First remove the leftovers: what carries the mark of a '
                 'deployment proven dead (its state directory is gone or '
                 'no longer records it), and processes serving BMCs of a '
                 'state directory that no longer has them. Nothing '
                 'unmarked, nothing of a live deployment.')
        return parser

    def take_action(self, args):
        started = time.monotonic()
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            report = tenks.audit(args.cluster, args.clean)
        self.drift = report['drift']
        if args.formatter == 'table':
            self.app.stderr.write(
                '%s%d removed, %d drifted, %d of others left alone, in '
                '%.2f s.\n' % ('Audit of cluster %s: ' % args.cluster
                                if args.cluster else 'Audit: ',
                                len(report['removed']), len(self.drift),
                                len(report['other']),
                                time.monotonic() - started))
        rows = report['removed'] + report['drift'] + report['other']
        if args.formatter == 'table':
            return AUDIT_COLUMNS, [['' if row[c] is None else row[c]
                                    for c in AUDIT_COLUMNS] for row in rows]
        return AUDIT_COLUMNS, [[row[c] for c in AUDIT_COLUMNS]
                               for row in rows]

    def run(self, parsed_args):
        super().run(parsed_args)
        return 1 if self.drift else 0


class Validate(Command):
    """Check spec files without deploying anything (exit 1 if invalid)."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('specs', nargs='+', metavar='SPEC',
                            help='Cluster spec (YAML file).')
        return parser

    def take_action(self, args):
        from tenks import spec as tenks_spec
        invalid = 0
        for path in args.specs:
            try:
                spec = tenks_spec.load(path)
            except exceptions.SpecError as exc:
                invalid += 1
                self.app.stderr.write('%s\n' % exc)
                continue
            self.app.stdout.write(
                '%s: valid: cluster %s, %d node(s)\n' % (
                    path, spec['cluster'],
                    sum(s['count'] for s in spec['specs'])))
        return 1 if invalid else 0


class NodeList(Lister):
    """List the nodes of every cluster, or of one."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--cluster', help='Only this cluster\'s nodes.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, read_only=True) as tenks:
            nodes = tenks.list_nodes(args.cluster)
        return NODE_COLUMNS, [node_row(n) for n in nodes]


class NodeShow(ShowOne):
    """Show a node: allocation, volumes, NICs, BMC and state."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('node', help='Node name or UUID.')
        parser.add_argument('--cluster',
                            help='The node\'s cluster, when several have '
                                 'a node of that name.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, read_only=True) as tenks:
            nodes = tenks.list_nodes(args.cluster)
        node = find_node(nodes, args.node, args.cluster)
        return NODE_SHOW_COLUMNS, node_row(node, NODE_SHOW_COLUMNS)


class ClusterList(Lister):
    """List the clusters."""

    def take_action(self, args):
        with client.connect(self.app.conf, read_only=True) as tenks:
            clusters = tenks.list_clusters()
        return CLUSTER_COLUMNS, [tuple(c[k] for k in CLUSTER_COLUMNS)
                                 for c in clusters]


class ClusterShow(ShowOne):
    """Show a cluster: state, spec (password masked) and nodes."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('cluster', help='Cluster name.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, read_only=True) as tenks:
            cluster = tenks.get_cluster(args.cluster)
        # Whatever else the record holds (its uuid, ...) between the
        # state and the spec.
        fields = CLUSTER_COLUMNS + tuple(
            k for k in cluster if k not in CLUSTER_COLUMNS + (
                'spec', 'nodes')) + ('spec', 'nodes')
        row = dict(cluster, spec=columns.SpecColumn(cluster['spec']),
                   nodes=columns.ListColumn(
                       [n['name'] for n in cluster['nodes']]))
        return fields, tuple(row[k] for k in fields)


class OperationShow(ShowOne):
    """Show an operation: state, progress per stage, error."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('operation', help='Operation id.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, read_only=True) as tenks:
            operation = tenks.get_operation(args.operation)
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
            if operation['state'] != 'succeeded':
                failed.append((operation['cluster'], operation['error']))
        if failed:
            raise exceptions.OperationFailed('; '.join(
                'cluster %s: %s' % item for item in failed))
        if args.wait:
            moved = sum(1 for o in operations
                        for task in o['result']['changed']
                        if task.endswith(':retire'))
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


def warn(app, result):
    """Print the ``warnings`` of a result (what Placement refused while
    following an aggregate change) to stderr; return the result."""
    for warning in (result or {}).get('warnings', []):
        app.stderr.write('Warning: %s\n' % warning)
    return result


def aggregate_row(aggregate, fields=AGGREGATE_SHOW_COLUMNS):
    row = dict(aggregate, hosts=columns.ListColumn(aggregate['hosts']),
               properties=columns.DictColumn(aggregate['metadata']))
    return tuple(row[c] for c in fields)


def properties(pairs):
    """{key: value} of --property key=value arguments."""
    result = {}
    for pair in pairs or ():
        key, sep, value = pair.partition('=')
        if not sep:
            raise exceptions.ConfigError(
                reason='--property %s: expected key=value' % pair)
        result[key] = value
    return result


class AggregateShowCommand(ShowOne):
    """Aggregates are admin calls: this CLI acts as admin."""

    def call(self, method, *args):
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            return getattr(tenks, method)(*args)


class AggregateList(Lister):
    """List host aggregates."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--long', action='store_true',
                            help='With properties and hosts.')
        return parser

    def take_action(self, args):
        fields = AGGREGATE_LONG_COLUMNS if args.long else AGGREGATE_COLUMNS
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            aggregates = tenks.list_aggregates()
        return fields, [aggregate_row(a, fields) for a in aggregates]


class AggregateCreate(AggregateShowCommand):
    """Create a host aggregate, in an availability zone if given."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--zone', help='Its availability zone.')
        parser.add_argument('--property', action='append',
                            metavar='<key=value>',
                            help='Metadata to set (repeat for more).')
        parser.add_argument('name', help='Its name (unique).')
        return parser

    def take_action(self, args):
        metadata = properties(args.property)
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            aggregate = tenks.create_aggregate(args.name, args.zone)
            if metadata:
                aggregate = tenks.set_aggregate_metadata(aggregate['id'],
                                                         metadata)
        return AGGREGATE_SHOW_COLUMNS, aggregate_row(aggregate)


class AggregateShow(AggregateShowCommand):
    """Show a host aggregate (by name or id)."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('aggregate', help='Its name or id.')
        return parser

    def take_action(self, args):
        return AGGREGATE_SHOW_COLUMNS, aggregate_row(
            self.call('get_aggregate', args.aggregate))


class AggregateSet(Command):
    """Rename a host aggregate, change its zone or set its metadata."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--name', help='Its new name.')
        parser.add_argument('--zone', help='Its new availability zone.')
        parser.add_argument('--property', action='append',
                            metavar='<key=value>',
                            help='Metadata to set (repeat for more).')
        parser.add_argument('aggregate', help='Its name or id.')
        return parser

    def take_action(self, args):
        values = {key: value for key, value in (
            ('name', args.name), ('availability_zone', args.zone))
            if value is not None}
        metadata = properties(args.property)
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            if values:
                tenks.update_aggregate(args.aggregate, values)
            if metadata:
                tenks.set_aggregate_metadata(
                    values.get('name', args.aggregate), metadata)


class AggregateUnset(Command):
    """Unset metadata of a host aggregate, or its zone."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--property', action='append', metavar='<key>',
                            help='Metadata key to unset (repeat for more).')
        parser.add_argument('--zone', action='store_true',
                            help='Take it out of its availability zone.')
        parser.add_argument('aggregate', help='Its name or id.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            if args.zone:
                tenks.update_aggregate(args.aggregate,
                                       {'availability_zone': None})
            if args.property:
                tenks.set_aggregate_metadata(args.aggregate,
                                             dict.fromkeys(args.property))


class AggregateDelete(Command):
    """Delete host aggregates, which must have no host."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('aggregate', nargs='+', help='Name or id.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            for aggregate in args.aggregate:
                warn(self.app, tenks.delete_aggregate(aggregate))


class AggregateAddHost(AggregateShowCommand):
    """Add a hypervisor to a host aggregate."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('aggregate', help='Its name or id.')
        parser.add_argument('host', help='Host name of the hypervisor.')
        return parser

    def take_action(self, args):
        return AGGREGATE_SHOW_COLUMNS, aggregate_row(warn(self.app, self.call(
            'add_aggregate_host', args.aggregate, args.host)))


class AggregateRemoveHost(AggregateAddHost):
    """Remove a hypervisor, which must be disabled, from an aggregate."""

    def take_action(self, args):
        return AGGREGATE_SHOW_COLUMNS, aggregate_row(warn(self.app, self.call(
            'remove_aggregate_host', args.aggregate, args.host)))


class Events(Lister):
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
        with client.connect(self.app.conf, read_only=True) as tenks:
            events = tenks.list_events(args.cluster, args.limit)
            if args.follow:
                write = self._writer(args.cluster)
                for event in events:
                    write(event)
                tenks.follow_events(write)
        return EVENT_COLUMNS, [
            tuple(columns.DictColumn(e[c]) if c == 'payload' else e[c]
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
