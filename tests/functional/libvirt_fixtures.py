"""A second libvirt daemon on this machine, so that two hostagents act
as distinct hypervisors down to libvirt: a domain of one name and UUID
can exist in both at once, as on two machines (a move needs that).

It runs in a mount namespace of its own, where its directories
(/run/libvirt, /var/lib/libvirt, /etc/libvirt, /var/cache/libvirt,
/var/log/libvirt) are bind mounts of a private directory; its socket is
reached from here at ``<dir>/run/libvirt-sock``. The network namespace
is this one: its domains' taps join this machine's bridges. Its QEMU
gets no cgroups of its own (they would clash with the system daemon's
of the same domain names and ids) and runs as root.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import time

import libvirt

from tests.functional import cluster_fixtures as cf

DIRS = {'run': '/run/libvirt', 'lib': '/var/lib/libvirt',
        'etc': '/etc/libvirt', 'cache': '/var/cache/libvirt',
        'log': '/var/log/libvirt'}

START = '''set -e
mount --make-rprivate /
%s
%s
exec libvirtd -d --pid-file "$ROOT/libvirtd.pid"
'''
VIRTLOGD = 'virtlogd -d -p "$ROOT/virtlogd.pid"'


def _pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def private_libvirtd(root, ours, timeout=90):
    """Run a libvirtd with its state under ``root`` (a path); yield its
    URI.

    It starts with the machine's daemon settings and nothing else: no
    domain, pool, network or filter of the machine's libvirt. On exit
    the domains and pools whose names ``ours(name)`` accepts (what the
    test made) are removed, the pools with their volumes, and both of
    its daemons stopped."""
    root = str(root)
    for name in DIRS:
        os.makedirs(os.path.join(root, name), exist_ok=True)
    etc = os.path.join(root, 'etc')
    # The settings files only: the definitions are in subdirectories.
    for name in os.listdir('/etc/libvirt'):
        path = os.path.join('/etc/libvirt', name)
        if os.path.isfile(path):
            shutil.copy(path, etc)
    with open(os.path.join(etc, 'qemu.conf'), 'a') as f:
        # Root: its QEMU reaches the tests' private temporary
        # directories.
        f.write('\ncgroup_controllers = [ ]\nuser = "root"\n'
                'group = "root"\n')
    # QEMU's capabilities, probed already by the system daemon: saves
    # the new daemon its ~10 s probe.
    with contextlib.suppress(OSError):
        shutil.copytree('/var/cache/libvirt/qemu',
                        os.path.join(root, 'cache', 'qemu'),
                        dirs_exist_ok=True)
    uri = 'qemu:///system?socket=%s/run/libvirt-sock' % root
    try:
        start_libvirtd(root, timeout, virtlogd=True)
        yield uri
    finally:
        _stop(root, uri, ours)


def start_libvirtd(root, timeout=90, virtlogd=False):
    """Start the libvirtd of ``root`` (a private_libvirtd's), stopped by
    stop_libvirtd, again (with its virtlogd: the first time)."""
    mounts = '\n'.join('mount --bind "$ROOT/%s" %s' % (name, target)
                       for name, target in DIRS.items())
    subprocess.run(['unshare', '-m', 'sh', '-c', START % (
        mounts, VIRTLOGD if virtlogd else '')], check=True, timeout=60,
        env=dict(os.environ, ROOT=root))
    uri = 'qemu:///system?socket=%s/run/libvirt-sock' % root
    deadline = time.monotonic() + timeout
    while True:
        try:
            libvirt.open(uri).close()
            return
        except libvirt.libvirtError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def stop_libvirtd(root, daemon='libvirtd'):
    """Stop the libvirtd (or virtlogd) of ``root``, a private_libvirtd's;
    its domains and pools stay defined."""
    pid = _pid(os.path.join(str(root), daemon + '.pid'))
    if pid is None:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.1)
    raise AssertionError('%s of %s did not stop' % (daemon, root))


def _stop(root, uri, ours):
    with contextlib.suppress(libvirt.libvirtError):
        cf.remove_libvirt_things(uri, ours)
    for daemon in ('libvirtd', 'virtlogd'):
        # One that will not stop is left: the test has its own error.
        with contextlib.suppress(AssertionError):
            stop_libvirtd(root, daemon)
