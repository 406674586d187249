"""The private libvirtd of the functional tests leaves the machine's own
libvirt alone: it starts with none of its domains or pools, and its
clean-up removes only what the test made there."""

import os
import secrets

import libvirt
import pytest

from tests.functional import cluster_fixtures as cf
from tests.functional import libvirt_fixtures as lf

pytestmark = pytest.mark.functional

DOMAIN = '''<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>64</memory>
  <os><type arch='x86_64'>hvm</type></os>
</domain>'''
POOL = '''<pool type='dir'>
  <name>%s</name>
  <target><path>%s</path></target>
</pool>'''
VOLUME = '''<volume>
  <name>disk0</name>
  <capacity unit='MiB'>1</capacity>
  <target><format type='raw'/></target>
</volume>'''


def define_pool(conn, name, path):
    """An active, autostarted dir pool at ``path`` with a volume disk0."""
    os.makedirs(path)
    pool = conn.storagePoolDefineXML(POOL % (name, path))
    pool.setAutostart(1)
    pool.create()
    pool.createXML(VOLUME)
    return pool


def test_private_daemon_starts_empty_and_removes_only_its_own(tmp_path):
    prefix = 'lx' + secrets.token_hex(2)
    system = libvirt.open(cf.URI)
    machine_pool_dir = str(tmp_path / 'machine-pool')
    own_pool_dir = str(tmp_path / 'own-pool')
    try:
        # The machine's: a defined domain and a pool with a volume.
        system.defineXML(DOMAIN % (prefix + '-machine'))
        define_pool(system, prefix + '-machine-pool', machine_pool_dir)
        with lf.private_libvirtd(
                tmp_path / 'libvirt',
                lambda name: name.startswith(prefix + '-own')) as uri:
            private = libvirt.open(uri)
            try:
                assert private.listAllDomains() == []
                assert private.listAllStoragePools() == []
                assert private.listAllNetworks() == []
                # What the test makes there.
                private.defineXML(DOMAIN % (prefix + '-own'))
                define_pool(private, prefix + '-own-pool', own_pool_dir)
            finally:
                private.close()
        # Its clean-up removed the test's own...
        assert not os.path.exists(os.path.join(own_pool_dir, 'disk0'))
        # ...and left the machine's as they were.
        system.lookupByName(prefix + '-machine')
        pool = system.storagePoolLookupByName(prefix + '-machine-pool')
        assert pool.isActive()
        pool.refresh()
        assert pool.listVolumes() == ['disk0']
        assert os.path.exists(os.path.join(machine_pool_dir, 'disk0'))
    finally:
        cf.remove_libvirt_things(cf.URI, lambda n: n.startswith(prefix))
        system.close()
