"""Commands on a cluster as a whole: plan, deploy, teardown, audit and
validate. The spec module (jsonschema, os-traits) is imported by the
commands that read specs, not by ``tenks --help``."""

import json
import os
import time

from tenks import exceptions
from tenks.cli import client
from tenks.cli.base import Command
from tenks.cli.base import Lister
from tenks.cli.base import OperationCommand
from tenks.cli.base import add_result_format

PLAN_COLUMNS = ('node', 'hypervisor', 'resource', 'action', 'field', 'old',
                'new')
AUDIT_COLUMNS = ('hypervisor', 'kind', 'name', 'status', 'cluster', 'mark',
                 'detail')


def load_spec(path):
    from tenks import spec as tenks_spec
    return tenks_spec.load(path)


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
        add_result_format(parser)
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
        add_result_format(parser)
        return parser

    def take_action(self, args):
        name = args.cluster
        if os.path.isfile(name):
            name = load_spec(name)['cluster']

        def describe(operation, elapsed):
            # What removed something: 'remove:<uuid>' for a node (its
            # task removes several: conductor.runner.RunReport), a task
            # for each other thing (bridge, pool, flavor...).
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
