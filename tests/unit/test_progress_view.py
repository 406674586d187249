"""What a person following an operation sees: a live view in a terminal
(a pseudo-terminal here), plain lines when stderr is piped or with -q."""

import io
import os
import re
import threading

from tenks import exceptions
from tenks.cli import main
from tenks.cli import progress
from tests.unit.test_cli import SPEC
from tests.unit.test_cli import write

ANSI = re.compile(r'\x1b\[[0-9;?]*[A-Za-z]')


class Terminal:
    """A pseudo-terminal whose output is read as it comes (a full one
    would block the writer); ``screen()``: what was written, without
    the escape codes."""

    def __init__(self):
        self.master, slave = os.openpty()
        self.stream = io.TextIOWrapper(os.fdopen(slave, 'wb'),
                                       encoding='utf-8', write_through=True)
        self.chunks = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.chunks.append(chunk)

    def screen(self):
        self.stream.close()
        self.reader.join(5)
        os.close(self.master)
        text = b''.join(self.chunks).decode('utf-8', 'replace')
        return ANSI.sub('', text).replace('\r', '')


def operation(state='running', progress_=None, error=None):
    return {'id': 'op-1', 'kind': 'deploy', 'cluster': 'c1', 'state': state,
            'progress': progress_ or {}, 'error': error,
            'created_at': '2026-01-01T00:00:00+00:00'}


def test_live_view_shows_stages_and_the_failure_rolled_back():
    terminal = Terminal()
    assert terminal.stream.isatty()
    shown = progress.view(terminal.stream, 'op-1')
    assert isinstance(shown, progress.LiveView)
    with shown:
        shown.update(operation(progress_={'node': [3, 8], 'bmc': [0, 8]}))
        shown.live.refresh()
        shown.notice('The conductor answers again')
        shown.update(operation(progress_={'node': [5, 8], 'bmc': [1, 8]},
                               error='bmc:tk4: port in use'))
        shown.live.refresh()
        shown.update(operation('failed', {'node': [5, 8], 'bmc': [1, 8]},
                               error='bmc:tk4: port in use'))
    screen = terminal.screen()
    assert 'deploy of c1  op-1  running' in screen
    assert re.search(r'node\s.*\s3/8', screen)
    assert re.search(r'node\s.*\s5/8', screen)
    assert 'The conductor answers again' in screen
    assert 'failed, rolling back: bmc:tk4: port in use' in screen
    # The last frame stays: the operation as it ended (the command's
    # error then says why).
    last = screen[screen.rindex('deploy of c1'):]
    assert last.startswith('deploy of c1  op-1  failed'), last
    assert re.search(r'node\s.*\s5/8', last) and 'port in use' not in last


def test_plain_lines_when_piped():
    out = io.StringIO()
    shown = progress.view(out, 'op-1')
    assert isinstance(shown, progress.PlainView)
    with shown:
        shown.update(operation(progress_={'node': [0, 2]}))
        shown.update(operation(progress_={'node': [1, 2]}))  # too soon
        shown.update(operation(error='node:tk1: boom'))
        shown.update(operation('failed', {'node': [1, 2]},
                               error='node:tk1: boom'))
    lines = [re.sub(r'\(\d+ s\)', '(N s)', line)
             for line in out.getvalue().splitlines()]
    assert lines == [
        'deploy op-1: failed, rolling back: node:tk1: boom',
        'deploy op-1: node 1/2 (N s)']


def run_cli(stderr, *args):
    app = main.TenksApp()
    app.stdout, app.stderr = io.StringIO(), stderr
    return app.run([str(a) for a in args]), app.stdout.getvalue()


def test_a_failed_deploy_in_a_terminal(tmp_path, hypervisor):
    """End to end: the live view of a deploy a fault fails, its last
    frame naming the failure; stdout keeps nothing of it."""
    hypervisor.fail[('domain', 'tk1')] = exceptions.DriverError(
        driver='libvirt', action='define tk1', reason='injected')
    terminal = Terminal()
    code, out = run_cli(terminal.stream, '--state-dir', tmp_path / 'state',
                        'deploy', write(tmp_path, 'unit.yaml', SPEC))
    screen = terminal.screen()
    assert code == 1
    assert re.search(r'deploy of unit  [0-9a-f-]+  failed', screen), screen
    assert out == ''


def test_quiet_deploy_prints_plain_lines(tmp_path, hypervisor):
    terminal = Terminal()
    code, out = run_cli(terminal.stream, '-q', '--state-dir',
                        tmp_path / 'state', 'deploy',
                        write(tmp_path, 'unit.yaml', SPEC))
    screen = terminal.screen()
    assert code == 0
    assert re.search(r'^deploy [0-9a-f-]+: .*node 2/2 \(\d+ s\)$', screen,
                     re.M), screen
    assert '\x1b' not in ''.join(c.decode() for c in terminal.chunks)
    assert 'Cluster unit deployed: 2 node(s)' in out
