"""Fixtures every functional test module may use."""

from tests.functional.openstack_fixtures import openstack_services  # noqa
