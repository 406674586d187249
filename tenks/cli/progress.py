"""What a person following an operation sees on stderr: in a terminal a
live view (stages, tasks done of all, elapsed time, the failure being
rolled back); otherwise, or with -q, plain lines as the progress
changes. stdout keeps only the command's result."""

import datetime
import time

from tenks import states

# Plain lines: one when the progress has changed, this often at most.
PLAIN_INTERVAL = 2.0


def view(stream, operation_id, plain=False):
    """The view for following ``operation_id`` on ``stream``."""
    if plain or not stream.isatty():
        return PlainView(stream, operation_id)
    return LiveView(stream, operation_id)


def elapsed(operation):
    """Seconds since the operation was recorded (0 if unknown)."""
    created = operation.get('created_at')
    if not created:
        return 0.0
    started = datetime.datetime.fromisoformat(created)
    if started.tzinfo is None:
        started = started.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (datetime.datetime.now(datetime.timezone.utc)
                     - started).total_seconds())


def summary(operation):
    """'stage done/all, ...' in the flow's order."""
    stages = (operation.get('progress') or {}).items()
    return ', '.join('%s %d/%d' % (stage, done, total)
                     for stage, (done, total) in stages)


def failure(operation):
    """What to say of the failure a running operation rolls back, or
    None (once it has ended, the command's error says it)."""
    if operation.get('error') and (
            operation['state'] == states.OPERATION_RUNNING):
        return 'failed, rolling back: %s' % operation['error']
    return None


class PlainView:

    def __init__(self, stream, operation_id):
        self.stream = stream
        self.operation_id = operation_id
        self._shown = None
        self._failure = None
        self._at = time.monotonic()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def notice(self, text):
        self._write(text)

    def update(self, operation):
        said = failure(operation)
        if said and operation['error'] != self._failure:
            self._failure = operation['error']
            self._write('%s %s: %s' % (operation['kind'],
                                       self.operation_id, said))
        line = summary(operation)
        if line and line != self._shown and (
                time.monotonic() - self._at >= PLAIN_INTERVAL
                or operation['state'] != states.OPERATION_RUNNING):
            self._shown = line
            self._at = time.monotonic()
            self._write('%s %s: %s (%d s)' % (
                operation['kind'], self.operation_id, line,
                elapsed(operation)))

    def _write(self, text):
        self.stream.write(text + '\n')
        self.stream.flush()


class LiveView:
    """A rich Live display, redrawn four times a second."""

    def __init__(self, stream, operation_id):
        from rich import console
        from rich import live
        self.operation_id = operation_id
        self.operation = None
        self.console = console.Console(file=stream)
        self.live = live.Live(console=self.console, auto_refresh=True,
                              refresh_per_second=4,
                              get_renderable=self._render)

    def __enter__(self):
        self.live.start()
        return self

    def __exit__(self, *exc):
        self.live.stop()

    def notice(self, text):
        self.console.print(text, markup=False, highlight=False)

    def update(self, operation):
        self.operation = operation

    def _render(self):
        from rich import progress_bar
        from rich import table
        from rich import text
        operation = self.operation
        grid = table.Table.grid(padding=(0, 2))
        if operation is None:
            grid.add_row(text.Text('operation %s: waiting for its record'
                                   % self.operation_id))
            return grid
        grid.add_row(text.Text('%s of %s  %s  %s  %d s' % (
            operation['kind'], operation['cluster'], self.operation_id,
            operation['state'], elapsed(operation)), style='bold'))
        stages = table.Table.grid(padding=(0, 2))
        for stage, (done, total) in (operation.get('progress')
                                     or {}).items():
            stages.add_row(stage, progress_bar.ProgressBar(
                total=max(total, 1), completed=done, width=30),
                '%d/%d' % (done, total))
        grid.add_row(stages)
        said = failure(operation)
        if said:
            grid.add_row(text.Text(said, style='red'))
        return grid
