"""``tenks aggregate ...``: host aggregates and availability zones."""

from tenks import exceptions
from tenks.cli import client
from tenks.cli import columns
from tenks.cli.base import Command
from tenks.cli.base import Lister
from tenks.cli.base import ShowOne

AGGREGATE_COLUMNS = ('id', 'name', 'availability_zone')
AGGREGATE_LONG_COLUMNS = AGGREGATE_COLUMNS + ('properties', 'hosts')
AGGREGATE_SHOW_COLUMNS = ('availability_zone', 'created_at', 'hosts', 'id',
                          'name', 'properties', 'updated_at', 'uuid')


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
