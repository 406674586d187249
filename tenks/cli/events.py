"""``tenks events``: lifecycle events, and --follow."""

import json

from tenks.cli import client
from tenks.cli import columns
from tenks.cli.base import Lister

EVENT_COLUMNS = ('timestamp', 'event_type', 'priority', 'payload')


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
