"""Fixtures every functional test module may use."""

import pytest

from tests.functional import cluster_fixtures
from tests.functional import drivers_fixtures
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
    return report
