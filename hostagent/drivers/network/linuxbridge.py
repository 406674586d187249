"""Network driver for Linux bridges, veth pairs and taps.

Changes go through netlink (pyroute2); reads that change nothing
(port_changes, for drift) go through sysfs. pyroute2 is imported where a
change is made: its import takes a tenth of a second, which a no-change
re-run would otherwise spend on nothing. Removing a bridge or tap needs
only sysfs and one fixed netlink message, so a teardown does without it.
"""

import contextlib
import errno
import fcntl
import os
import socket
import struct
import threading

from oslo_concurrency import lockutils

from hostagent.drivers import base
from tenks import exceptions
from tenks import names as tenks_names
from tenks import states

SYSFS_NET = '/sys/class/net'
IFF_UP = 0x1

# rtnetlink, for RTM_DELLINK (linux/netlink.h, linux/rtnetlink.h).
RTM_DELLINK = 17
NLMSG_ERROR = 2
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLMSGHDR = struct.Struct('=IHHII')  # length, type, flags, seq, pid
IFINFOMSG = struct.Struct('=BxHiII')  # family, type, index, flags, change


def iproute():
    """A netlink handle (a context manager)."""
    from pyroute2 import IPRoute
    return IPRoute()


def _get(ipr, name):
    """The link called ``name``, or None."""
    from pyroute2.netlink.exceptions import NetlinkError
    try:
        return ipr.link('get', ifname=name)[0]
    except NetlinkError as e:
        if e.code == errno.ENODEV:
            return None
        raise


def _kind(link):
    return link.get(('linkinfo', 'kind'))


def _owned(ipr, name, owner, kind):
    """Our link ``name`` of ``kind``, or None.

    Raises ResourceConflict when it exists without our owner alias.
    """
    link = _get(ipr, name)
    if link is None:
        return None
    reason = _not_ours(link, owner, kind)
    if reason:
        raise exceptions.ResourceConflict(
            kind='Interface', name=name, owner=owner, reason=reason)
    return link


def _not_ours(link, owner, kind):
    """Why ``link`` is not our ``kind`` of interface; None if it is."""
    return _not_marked(link.get('ifalias'), _kind(link), owner, kind)


def _not_marked(mark, link_kind, owner, kind):
    if not tenks_names.owns(owner, mark):
        return ('it has no owner mark' if not mark
                else 'its alias is %r' % mark)
    if link_kind != kind:
        return 'it is %s, not a %s' % (
            'a ' + link_kind if link_kind else 'another kind of link', kind)
    return None


def _sysfs_link(name):
    """What _settings and _not_marked need of link ``name``, read from
    sysfs, or None if it does not exist."""
    path = os.path.join(SYSFS_NET, name)

    def read(attribute):
        with open(os.path.join(path, attribute)) as f:
            return f.read().strip()

    try:
        link = {'index': int(read('ifindex')),
                'ifalias': read('ifalias') or None,
                'state': 'up' if int(read('flags'), 16) & IFF_UP
                         else 'down'}
    except FileNotFoundError:
        return None
    try:
        link['master'] = int(read('master/ifindex'))
    except FileNotFoundError:
        link['master'] = 0
    link['kind'] = ('bridge' if os.path.isdir(os.path.join(path, 'bridge'))
                    else 'tun' if os.path.exists(os.path.join(path,
                                                              'tun_flags'))
                    else None)
    return link


def marked_links():
    """Every link that carries a Tenks owner mark as its alias, read
    from sysfs: [{'kind': 'bridge' (with its 'ports'), 'port' (a tap) or
    'veth' (what else Tenks makes: an uplink's end, with its 'peer'),
    'name', 'mark', 'master'}]."""
    found, indexes = [], {}
    try:
        names = sorted(os.listdir(SYSFS_NET))
    except FileNotFoundError:
        return found
    for name in names:
        try:
            link = _marked_link(name, indexes)
        except (OSError, ValueError):
            continue  # going or gone since the listing (sysfs: EINVAL)
        if link is not None:
            found.append(link)
    for link in found:
        if link['kind'] == 'veth':
            link['peer'] = indexes.get(link['peer'])
    return found


def sysfs_owned(name, owner, kind):
    """Our link ``name`` of ``kind`` as _sysfs_link reads it, or None;
    ResourceConflict when it is not ours. Sysfs, not netlink: a read
    costs a few system calls, not pyroute2's parsing."""
    link = _sysfs_link(name)
    if link is not None:
        reason = _not_marked(link['ifalias'], link['kind'], owner, kind)
        if reason:
            raise exceptions.ResourceConflict(
                kind='Interface', name=name, owner=owner, reason=reason)
    return link


def delete_link(link):
    """Delete ``link`` (as sysfs_owned read it) by its index: an
    interface that replaced it since keeps its new index and is left
    alone. Whether it was still there; OSError if the kernel refuses."""
    try:
        _delete_link(link['index'])
    except OSError as e:
        if e.errno == errno.ENODEV:
            return False
        raise
    return True


def _delete_link(index):
    """Delete the link with ``index``; OSError with the kernel's errno
    when it refuses (ENODEV: it is gone)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                       socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, 0, 0)
        sock.send(NLMSGHDR.pack(NLMSGHDR.size + len(body), RTM_DELLINK,
                                NLM_F_REQUEST | NLM_F_ACK, 1, 0) + body)
        reply = sock.recv(65536)
    kind = NLMSGHDR.unpack_from(reply)[1]
    # The ack is an NLMSG_ERROR whose error is 0, or -errno.
    code = struct.unpack_from('=i', reply, NLMSGHDR.size)[0]
    if kind != NLMSG_ERROR:
        raise OSError(errno.EPROTO, 'unexpected netlink reply type %d'
                      % kind)
    if code:
        raise OSError(-code, os.strerror(-code))


def _bridge_index(ipr, name, owner):
    link = _owned(ipr, name, owner, 'bridge')
    if link is None:
        raise exceptions.DriverError(
            driver='linuxbridge', action='use bridge %s' % name,
            reason='it does not exist')
    return link['index']


def _configure(ipr, link, master=None, owner=None):
    """Set ``link`` up, in ``master``, with alias ``owner``.

    ``master`` or ``owner`` None leaves that alone. Returns True if it
    changed anything.
    """
    changes = _settings(link, master, owner)
    if changes:
        ipr.link('set', index=link['index'], **changes)
    return bool(changes)


def _settings(link, master, owner):
    """The settings _configure would change: {name: wanted value}."""
    current = {'state': link.get('state'),
               'master': link.get('master') or 0,
               'ifalias': link.get('ifalias')}
    if owner is not None and tenks_names.owns(owner, current['ifalias']):
        # Ours already (made before marks named hostagents, maybe).
        owner = None
    wanted = {'state': 'up', 'master': master, 'ifalias': owner}
    return {key: value for key, value in wanted.items()
            if value is not None and current[key] != value}


@contextlib.contextmanager
def _adding(name, owner):
    """Turn EEXIST from creating ``name`` into ResourceConflict.

    The link was absent when we looked: another process made it since.
    Nothing of it is ours, so nothing is undone.
    """
    from pyroute2.netlink.exceptions import NetlinkError
    try:
        yield
    except NetlinkError as e:
        if e.code != errno.EEXIST:
            raise
        raise exceptions.ResourceConflict(
            kind='Interface', name=name, owner=owner,
            reason='another process created it meanwhile') from e


def _add_tap(name):
    """Create the persistent tap ``name``; NetlinkError EEXIST if it
    exists.

    pyroute2's tuntap add attaches to an existing tap of that name and
    succeeds; IFF_TUN_EXCL makes the kernel refuse instead.
    """
    from pyroute2.netlink.exceptions import NetlinkError
    from pyroute2.netlink.rtnl import ifinfmsg
    from pyroute2.netlink.rtnl.ifinfmsg import tuntap
    ifr = struct.pack('16sH', name.encode(),
                      ifinfmsg.IFT_TAP | ifinfmsg.IFT_TUN_EXCL)
    fd = os.open(tuntap.TUNDEV, os.O_RDWR)
    try:
        try:
            fcntl.ioctl(fd, tuntap.TUNSETIFF, ifr)
        except OSError as e:
            if e.errno == errno.EBUSY:
                raise NetlinkError(
                    errno.EEXIST, os.strerror(errno.EEXIST)) from e
            raise
        # Without it the tap goes with the file descriptor.
        fcntl.ioctl(fd, tuntap.TUNSETPERSIST, 1)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _undone_on_error(ipr, name):
    """Delete the link ``name`` this request made if what follows fails.

    ``name`` None: nothing was made.
    """
    from pyroute2.netlink.exceptions import NetlinkError
    try:
        yield
    except Exception:
        if name is not None:
            # The first error is the one to report.
            with contextlib.suppress(NetlinkError):
                link = _get(ipr, name)
                if link is not None:
                    ipr.link('del', index=link['index'])
        raise


def _marked_link(name, indexes):
    """What marked_links says of link ``name``, or None when it carries
    no Tenks mark; notes its index in ``indexes``."""
    path = os.path.join(SYSFS_NET, name)
    with open(os.path.join(path, 'ifindex')) as f:
        indexes[int(f.read())] = name
    with open(os.path.join(path, 'ifalias')) as f:
        mark = f.read().strip()
    if not mark.startswith(tenks_names.OWNER_PREFIX):
        return None
    master = os.path.join(path, 'master')
    link = {'name': name, 'mark': mark,
            'master': (os.path.basename(os.readlink(master))
                       if os.path.islink(master) else None)}
    if os.path.isdir(os.path.join(path, 'bridge')):
        link.update(kind='bridge', ports=sorted(
            os.listdir(os.path.join(path, 'brif'))))
    elif os.path.exists(os.path.join(path, 'tun_flags')):
        link['kind'] = 'port'
    else:
        with open(os.path.join(path, 'iflink')) as f:
            link.update(kind='veth', peer=int(f.read()))
    return link


def remove_veth(name, owner):
    """Delete the veth pair of which ``name`` is an end, when both ends
    are ``owner``'s veths (see NetworkDriver.remove_veth)."""
    from pyroute2.netlink.exceptions import NetlinkError
    try:
        with iproute() as ipr:
            end = _owned(ipr, name, owner, 'veth')
            if end is None:
                return False
            peer = ipr.link('get', index=end.get('link'))[0]
            reason = _not_ours(peer, owner, 'veth')
            if reason:
                raise exceptions.ResourceConflict(
                    kind='Interface', name=peer.get('ifname'), owner=owner,
                    reason='%s, and it is the peer of veth %s' % (reason,
                                                                 name))
            # Its peer goes with it.
            ipr.link('del', index=end['index'])
    except NetlinkError as e:
        if e.code == errno.ENODEV:
            return False
        raise exceptions.DriverError(
            driver='linuxbridge', action='delete veth %s' % name,
            reason=str(e)) from e
    return True


class LinuxBridgeDriver(base.NetworkDriver):
    """Linux bridges and their ports, marked with the owner as alias."""

    def __init__(self, conf):
        super().__init__(conf)
        # Serialise create-then-mark so that no thread sees one of our
        # interfaces before it carries the owner alias: bridges and
        # uplinks under one lock, a node's tap under its name's (a
        # thousand nodes' taps are made at once).
        self._lock = threading.Lock()
        self._port_locks = lockutils.Semaphores()

    @contextlib.contextmanager
    def _netlink(self, action, *names):
        """Yield an IPRoute; turn failures into DriverError."""
        for name in names:
            if len(name) > tenks_names.IFNAMSIZ:
                raise exceptions.DriverError(
                    driver='linuxbridge', action=action,
                    reason='interface name %s is longer than %d characters'
                           % (name, tenks_names.IFNAMSIZ))
        from pyroute2.netlink.exceptions import NetlinkError
        try:
            with iproute() as ipr:
                yield ipr
        except (NetlinkError, OSError) as e:
            raise exceptions.DriverError(
                driver='linuxbridge', action=action, reason=str(e)) from e

    def ensure_bridge(self, name, owner):
        """See base; the MAC is pinned so that joining ports keep it."""
        with self._lock, self._netlink('create bridge %s' % name,
                                       name) as ipr:
            link = _owned(ipr, name, owner, 'bridge')
            created = link is None
            if created:
                # The undo is armed only once the add succeeded: what
                # another process made meanwhile is not ours to delete.
                with _adding(name, owner):
                    ipr.link('add', ifname=name, kind='bridge')
            with _undone_on_error(ipr, name if created else None):
                if created:
                    link = _get(ipr, name)
                    # Pin the MAC: a bridge would otherwise take the
                    # lowest MAC of its ports whenever they change.
                    ipr.link('set', index=link['index'],
                             address=link.get('address'))
                changed = _configure(ipr, link, owner=owner)
            return base.ensured(created, changed, mac=link.get('address'))

    def remove_bridge(self, name, owner):
        return self._remove(name, owner, 'bridge')

    def _remove(self, name, owner, kind):
        """Delete our link ``name`` of ``kind``, read from sysfs and
        deleted by index: an interface that replaced it since keeps its
        new index and is left alone."""
        if len(name) > tenks_names.IFNAMSIZ:
            raise exceptions.DriverError(
                driver='linuxbridge', action='delete interface %s' % name,
                reason='interface name %s is longer than %d characters'
                       % (name, tenks_names.IFNAMSIZ))
        link = sysfs_owned(name, owner, kind)
        if link is None:
            return False
        try:
            return delete_link(link)
        except OSError as e:
            raise exceptions.DriverError(
                driver='linuxbridge', action='delete interface %s' % name,
                reason=str(e)) from e

    def ensure_uplink(self, bridge, source, veth_names, owner):
        """See base; ``bridge`` must be ours already.

        InterfaceNotFound names physnet '?': this call is not told it.
        A non-bridge ``source`` that is in another master is left there:
        ResourceConflict.
        """
        action = 'connect bridge %s to %s' % (bridge, source)
        with self._lock, self._netlink(action, bridge, source,
                                       *veth_names) as ipr:
            bridge_index = _bridge_index(ipr, bridge, owner)
            src = _get(ipr, source)
            if src is None:
                raise exceptions.InterfaceNotFound(name=source, physnet='?')
            if _kind(src) != 'bridge':
                master = src.get('master') or 0
                if master not in (0, bridge_index):
                    raise exceptions.ResourceConflict(
                        kind='Interface', name=source, owner=owner,
                        reason='it is enslaved to another master')
                # One request: it is enslaved, or nothing changed.
                changed = _configure(ipr, src, bridge_index)
                return base.ensured(master != bridge_index, changed)
            ends = [_owned(ipr, n, owner, 'veth') for n in veth_names]
            if ends.count(None) == 1:
                raise exceptions.DriverError(
                    driver='linuxbridge', action=action,
                    reason='veth %s exists without its peer %s' % (
                        (veth_names if ends[1] is None
                         else veth_names[::-1])))
            created = ends[0] is None
            if created:
                # One request to create the pair, another to enslave it:
                # the kernel refuses both at once.
                with _adding('%s or %s' % tuple(veth_names), owner):
                    ipr.link('add', ifname=veth_names[0], kind='veth',
                             peer=veth_names[1])
            with _undone_on_error(ipr, veth_names[0] if created else None):
                if created:
                    ends = [_get(ipr, n) for n in veth_names]
                changed = _configure(ipr, ends[0], bridge_index, owner)
                changed = (_configure(ipr, ends[1], src['index'], owner)
                           or changed)
            return base.ensured(created, changed)

    def remove_uplink(self, bridge, source, veth_names, owner):
        """See base; ``source`` is released only from our ``bridge``.

        Everything is checked before anything is removed.
        """
        action = 'disconnect bridge %s from %s' % (bridge, source)
        with self._netlink(action, bridge, source, *veth_names) as ipr:
            ends = [_owned(ipr, n, owner, 'veth') for n in veth_names]
            br = _owned(ipr, bridge, owner, 'bridge')
            src = _get(ipr, source)
            changed = False
            for name, end in zip(veth_names, ends, strict=True):
                # Deleting one end deletes the other.
                if end is not None and _get(ipr, name) is not None:
                    ipr.link('del', index=end['index'])
                    changed = True
            if (br is not None and src is not None
                    and _kind(src) != 'bridge'
                    and src.get('master') == br['index']):
                ipr.link('set', index=src['index'], master=0)
                changed = True
        return changed

    def ensure_port(self, bridge, name, owner):
        """See base; a single-queue tap that outlives the domain's runs."""
        action = 'create tap %s in bridge %s' % (name, bridge)
        with self._port_locks.get(name), self._netlink(
                action, bridge, name) as ipr:
            bridge_index = _bridge_index(ipr, bridge, owner)
            link = _owned(ipr, name, owner, 'tun')
            created = link is None
            if created:
                # Persistent, single queue: libvirt re-opens it by name
                # for <interface type='ethernet'> managed='no'.
                with _adding(name, owner):
                    _add_tap(name)
            with _undone_on_error(ipr, name if created else None):
                if created:
                    link = _get(ipr, name)
                changed = _configure(ipr, link, bridge_index, owner)
            return base.ensured(created, changed)

    def remove_port(self, name, owner):
        return self._remove(name, owner, 'tun')

    def remove_veth(self, name, owner):
        return remove_veth(name, owner)

    def marked(self):
        """See base: the links Tenks marks (aliases), read from sysfs."""
        return marked_links()

    def port_changes(self, ports, owner):
        """See base; read from sysfs, each bridge once."""
        changes, bridges = {}, {}
        for port in ports:
            tap, name = port['tap'], port['bridge']
            if name not in bridges:
                bridges[name] = _sysfs_link(name)
            bridge, link = bridges[name], _sysfs_link(tap)
            if link is None:
                changes[tap] = None
            elif _not_marked(link['ifalias'], link['kind'], owner, 'tun'):
                changes[tap] = states.PART_FOREIGN
            elif bridge is None or _not_marked(
                    bridge['ifalias'], bridge['kind'], owner, 'bridge'):
                # ensure_port fails: it makes ports in our bridges only.
                changes[tap] = ['bridge %s missing or not ours'
                                % port['bridge']]
            else:
                changes[tap] = ['%s %s' % item for item in sorted(
                    _settings(link, bridge['index'], owner).items())]
        return changes
