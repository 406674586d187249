"""Helpers of the driver functional tests: config, names and clean-up.

Each test names what it creates with its own prefix ``hx<4 hex>``;
:class:`Leftovers` removes everything with that prefix at teardown,
straight through libvirt and netlink, so that neither a failing test nor
a faulty driver leaves anything behind.
"""

import contextlib
import os
import secrets
import shutil
import tempfile

import libvirt
from pyroute2 import IPRoute

from tenks import conf as tenks_conf

URI = 'qemu:///system'
# Owner marks of two deployments of one cluster name (two state dirs).
OWNER = 'tenks:hxtest:9d3c8f0e-2b6a-4c1e-8f7d-0a5b6c7d8e9f'
OTHER = 'tenks:hxtest:1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9'

# ensure_* results
CREATED = {'created': True, 'changed': True}
FIXED = {'created': False, 'changed': True}
UNCHANGED = {'created': False, 'changed': False}


def make_conf(tmp_path, **hostagent):
    """A Tenks config with state in ``tmp_path``; overrides [hostagent]."""
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    conf.set_override('state_dir', str(tmp_path))
    for key, value in hostagent.items():
        conf.set_override(key, value, group='hostagent')
    return conf


class Leftovers:
    """Names for one test's things, and their removal."""

    def __init__(self):
        self.prefix = 'hx' + secrets.token_hex(2)
        self._dirs = []

    def name(self, suffix):
        return self.prefix + suffix

    def directory(self):
        """A fresh directory the qemu user can traverse (not in /tmp)."""
        path = tempfile.mkdtemp(prefix=self.prefix, dir='/var/tmp')
        os.chmod(path, 0o711)
        self._dirs.append(path)
        return path

    def _ours(self, objects):
        return [o for o in objects if o.name().startswith(self.prefix)]

    def clean(self):
        """Remove all that carries the prefix; return what survived."""
        conn = libvirt.open(URI)
        try:
            for dom in self._ours(conn.listAllDomains()):
                with contextlib.suppress(libvirt.libvirtError):
                    dom.destroy()
                with contextlib.suppress(libvirt.libvirtError):
                    dom.undefineFlags(
                        libvirt.VIR_DOMAIN_UNDEFINE_NVRAM
                        | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA)
            for pool in self._ours(conn.listAllStoragePools()):
                with contextlib.suppress(libvirt.libvirtError):
                    pool.destroy()
                with contextlib.suppress(libvirt.libvirtError):
                    pool.undefine()
            survivors = [o.name() for o in
                         self._ours(conn.listAllDomains())
                         + self._ours(conn.listAllStoragePools())]
        finally:
            conn.close()
        with IPRoute() as ipr:
            # Bridges first: that releases ports, and deleting a veth end
            # deletes its peer.
            links = sorted(self._links(ipr),
                           key=lambda link: link.get(('linkinfo', 'kind'))
                           != 'bridge')
            for link in links:
                with contextlib.suppress(Exception):
                    ipr.link('del', index=link['index'])
            survivors += [link.get('ifname') for link in self._links(ipr)]
        for path in self._dirs:
            shutil.rmtree(path, ignore_errors=True)
        return survivors

    def _links(self, ipr):
        return [link for link in ipr.get_links()
                if link.get('ifname').startswith(self.prefix)]
