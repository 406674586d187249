"""Fixtures every functional test module may use."""

import collections
import contextlib
import os
import subprocess

import pytest

from tests.functional import cluster_fixtures
from tests.functional import drivers_fixtures
from tests.functional import openstack_fixtures
from tests.functional.ironic_snmp_fixtures import ironic_snmp  # noqa
from tests.functional.jobboard_fixtures import redis_url  # noqa
from tests.functional.jobboard_fixtures import zookeeper_url  # noqa
from tests.functional.openstack_fixtures import cloud  # noqa
from tests.functional.openstack_fixtures import full_nova  # noqa
from tests.functional.openstack_fixtures import openstack_services  # noqa


@pytest.fixture
def left():
    """Names for a driver test's things; fails it if any survive."""
    leftovers = drivers_fixtures.Leftovers()
    yield leftovers
    assert leftovers.clean() == []


def pytest_configure(config):
    # A run stopped by kill or a timeout still tears its fixtures down.
    cluster_fixtures.interrupt_on_sigterm()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each test's call report, so that its fixtures know at
    teardown whether it failed (see cluster_fixtures.call_failed)."""
    report = yield
    if report.when == 'call':
        item.stash[cluster_fixtures.CALL_REPORT] = report
    if report.failed:
        _keep_failure(item, report)
    return report


def _keep_failure(item, report):
    """Append a failure's whole report to failures.txt in the run's base
    temporary directory, which pytest keeps after the run: a CI log may
    show only part of it, and CI's checkout is gone afterwards."""
    factory = getattr(item.config, '_tmp_path_factory', None)
    if factory is None:
        return
    with open(factory.getbasetemp() / 'failures.txt', 'a') as f:
        f.write('=== %s (%s)\n%s\n' % (item.nodeid, report.when,
                                       report.longreprtext))
        if 'openstack_services' in item.fixturenames:
            log = os.path.join(openstack_fixtures.services.state_dir(),
                               'logs', 'ironic-conductor.log')
            with contextlib.suppress(OSError), open(log) as conductor:
                f.write('--- the end of %s\n%s\n' % (
                    log, ''.join(collections.deque(conductor, 400))))


@pytest.fixture
def small_pools(tmp_path):
    """A pool directory on a file system of its own: 3 GiB of ext4 in a
    sparse file (the scheduler counts whole GiB), none reserved for
    root."""
    disk, path = tmp_path / 'pools.ext4', tmp_path / 'pools'
    path.mkdir()
    with open(disk, 'wb') as f:
        f.truncate(3 * 1024 ** 3)
    subprocess.run(['mkfs.ext4', '-q', '-m', '0', str(disk)], check=True)
    subprocess.run(['mount', '-o', 'loop', str(disk), str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(['umount', str(path)], check=True)
