"""``tenks node list|show`` and ``tenks node fault set|clear``."""

import argparse

from tenks import bmc_faults
from tenks import constants
from tenks import exceptions
from tenks.cli import client
from tenks.cli import columns
from tenks.cli.base import Command
from tenks.cli.base import Lister
from tenks.cli.base import ShowOne

NODE_COLUMNS = ('name', 'uuid', 'cluster', 'hypervisor', 'domain', 'vcpus',
                'memory_mb', 'macs', 'bmc_type', 'bmc_address', 'bmc_port',
                'bmc_system_id', 'state')
NODE_SHOW_COLUMNS = ('name', 'uuid', 'cluster', 'hypervisor', 'domain',
                     'node_type', 'state', 'vcpus', 'memory_mb', 'volumes',
                     'nics', 'macs', 'bmc_type', 'bmc_address', 'bmc_port',
                     'bmc_system_id', 'bmc_fault', 'boot_mode',
                     'secure_boot', 'console_log')


def node_row(node, fields=NODE_COLUMNS):
    row = dict(node, domain=node['name'],
               bmc_system_id=node.get('bmc_system_id'),
               bmc_fault=node.get('bmc_fault') and columns.DictColumn(
                   node['bmc_fault']),
               macs=columns.ListColumn([nic['mac'] for nic in node['nics']]),
               nics=columns.ListColumn(node['nics']),
               volumes=columns.ListColumn(node['volumes']))
    return tuple(row[c] for c in fields)


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


def page_size(value):
    size = int(value)
    if size < 1:
        raise argparse.ArgumentTypeError('%s is not above 0' % value)
    return size


def sort_order(value):
    """KEY[:DIR] -> {'sort_key', 'sort_dir'}; the conductor checks them."""
    key, _, direction = value.partition(':')
    return {'sort_key': key, 'sort_dir': direction or 'asc'}


class NodeList(Lister):
    """List the nodes of every cluster, or of one, by cluster and name.

    A big cluster can be listed page by page: --limit N, then --marker
    with the UUID of the last node shown.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('--cluster', help='Only this cluster\'s nodes.')
        parser.add_argument('--limit', type=page_size, metavar='N',
                            help='At most N nodes (default: all).')
        parser.add_argument('--marker', metavar='UUID',
                            help='Only the nodes after the node with this '
                                 'UUID (the last of the page before).')
        parser.add_argument('--sort', type=sort_order, default={},
                            metavar='KEY[:DIR]',
                            help='Order by KEY (%s), asc (default) or '
                                 'desc, the UUID breaking ties.' % ', '.join(
                                     constants.NODE_SORT_KEYS))
        return parser

    def take_action(self, args):
        paging = dict(args.sort, limit=args.limit, marker=args.marker)
        with client.connect(self.app.conf, read_only=True) as tenks:
            nodes = tenks.list_nodes(args.cluster, **{
                k: v for k, v in paging.items() if v is not None})
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


class NodeFaultSet(ShowOne):
    """Make a node's BMC misbehave until the fault is cleared.

    unreachable: no answer; slow: answers --duration seconds late
    (default 5); error: an IPMI completion code, an HTTP 500; power-stuck:
    acknowledges power changes it does not make; boot-device-ignored:
    acknowledges a boot device it does not set; flaky: fails as error
    does with probability --probability (default 0.5). For IPMI and
    Redfish BMCs. Admin only.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('node', help='Node name or UUID.')
        parser.add_argument('kind', choices=bmc_faults.KINDS,
                            help='What the BMC does.')
        parser.add_argument('--duration', type=float, metavar='S',
                            help='slow: the delay of each answer, in '
                                 'seconds (default %g, at most %g).' % (
                                     bmc_faults.DEFAULT_DELAY,
                                     bmc_faults.MAX_DELAY))
        parser.add_argument('--probability', type=float, metavar='P',
                            help='flaky: the probability that a request '
                                 'fails, above 0 and at most 1 (default '
                                 '%g).' % bmc_faults.DEFAULT_PROBABILITY)
        parser.add_argument('--cluster',
                            help='The node\'s cluster, when several have '
                                 'a node of that name.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            node = tenks.set_bmc_fault(args.node, args.kind, args.duration,
                                       args.probability, args.cluster)
        return NODE_SHOW_COLUMNS, node_row(node, NODE_SHOW_COLUMNS)


class NodeFaultClear(Command):
    """Make a node's BMC (or, with --all, every faulted BMC) well again."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument('node', nargs='?', help='Node name or UUID.')
        which.add_argument('--all', action='store_true',
                           help='Every node with a BMC fault (of --cluster).')
        parser.add_argument('--cluster',
                            help='The node\'s cluster; with --all, only '
                                 'its nodes.')
        return parser

    def take_action(self, args):
        with client.connect(self.app.conf, exits=self.app.exits) as tenks:
            answer = tenks.clear_bmc_fault(args.node, args.cluster, args.all)
        for name in answer['cleared']:
            self.app.stdout.write('BMC fault of node %s cleared.\n' % name)
        if answer['failed']:
            raise exceptions.BmcFaultsLeft(failed='; '.join(
                '%s: %s' % item for item in sorted(answer['failed'].items())))
