"""Tenks: virtual bare metal clusters for OpenStack Ironic."""

__version__ = '0.1.0'
