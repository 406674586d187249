"""A test that fails or is stopped still removes what it made: the
fault suite's cases run for an hour, and a leftover of one breaks the
next (and the machine's other tests)."""

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time

import pytest
from pyroute2 import IPRoute

from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


class Made:
    """A stand-in cluster: one thing left until force_clean."""

    def __init__(self):
        self.cleaned = False

    def leftovers(self):
        return [] if self.cleaned else ['domain x']

    def force_clean(self):
        self.cleaned = True


def test_a_failed_checked_block_is_cleaned_up():
    made = Made()
    with pytest.raises(ValueError):
        with cf.checked(made):
            raise ValueError('the test failed')
    assert made.cleaned


INNER = '''
import contextlib
import os
import time

import pytest
from pyroute2 import IPRoute


@pytest.fixture
def bridge():
    with IPRoute() as ipr:
        ipr.link('add', ifname=%(name)r, kind='bridge')
    yield
    with IPRoute() as ipr:
        ipr.link('del', ifname=%(name)r)


def test_runs_long(bridge):
    open(%(ready)r, 'w').close()
    time.sleep(120)
'''


def links(name):
    with IPRoute() as ipr:
        return [link.get('ifname') for link in ipr.get_links()
                if link.get('ifname') == name]


def test_a_run_stopped_by_sigterm_tears_its_fixtures_down(tmp_path):
    """SIGTERM, as ``kill`` or a timeout sends it to a run's process
    group, interrupts it as Ctrl-C does: its fixtures are finalized."""
    name = 'sgt%s' % secrets.token_hex(3)
    ready = tmp_path / 'ready'
    inner = tmp_path / 'test_inner.py'
    inner.write_text(INNER % {'name': name, 'ready': str(ready)})
    run = subprocess.Popen(
        [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
         '-p', 'tests.functional.conftest', '--rootdir', str(tmp_path),
         str(inner)], cwd=ROOT, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert run.poll() is None, run.stdout.read()
            assert time.monotonic() < deadline, 'the inner test never ran'
            time.sleep(0.1)
        assert links(name) == [name]
        os.killpg(run.pid, signal.SIGTERM)
        output = run.communicate(timeout=60)[0]
        assert links(name) == [], output
    finally:
        if run.poll() is None:
            run.kill()
        with IPRoute() as ipr, contextlib.suppress(Exception):
            ipr.link('del', ifname=name)
