"""Network driver for Open vSwitch bridges (ovsdbapp).

Bridges, patch ports and the ports of taps and veths are rows of the
local OVSDB, written through ovsdbapp (one transaction per request, so a
row never exists without its mark; requests made at the same time share
one: group_commit), or read and their ports removed by transactions on
the server's socket in a process that has built no IDL yet (a re-run's
inspection, a teardown: OpenvSwitchDriver._direct); the taps and veths
themselves are kernel links made over netlink, marked with the owner as
their alias as the Linux bridge driver marks its links. OVS rows carry
the owner in ``external_ids`` under :data:`MARK`.

A node's NIC is a persistent tap (named as with Linux bridges) added as
a port of the bridge, and its domain opens that tap as it opens it
there: the port exists while the VM is off, keeps what a switch driver
(networking-generic-switch) sets on it across power cycles, and is
never touched by libvirt.

Bridges get ``datapath_type`` ``[hostagent] ovs_datapath_type``
(``netdev``, the userspace datapath, works without the kernel's
openvswitch module) and a MAC derived from their name and owner, pinned
in ``other_config:hwaddr`` so that it stays the switch id Ironic has
whatever ports come and go.
"""

import contextlib
import functools
import hashlib
import os
import threading
import time

from oslo_concurrency import lockutils
from oslo_log import log as logging

from hostagent.drivers import base
from hostagent.drivers.network import group_commit
from hostagent.drivers.network import linuxbridge as lb
from tenks import exceptions
from tenks import names as tenks_names
from tenks import states

LOG = logging.getLogger(__name__)

DRIVER = 'openvswitch'
# The external_ids key of the owner mark of Tenks' bridges and ports.
MARK = 'tenks-owner'
# The columns the driver and the ovsdbapp commands it runs use: the IDL
# keeps a copy of these only (not, say, every interface's statistics),
# which a command's first connection downloads and parses.
COLUMNS = {
    'Open_vSwitch': ['bridges', 'cur_cfg', 'next_cfg'],
    'Bridge': ['name', 'external_ids', 'datapath_type', 'other_config',
               'ports'],
    'Port': ['name', 'external_ids', 'interfaces'],
    'Interface': ['name', 'type', 'options', 'ofport'],
}


# One ovsdbapp API (an IDL kept in sync by its thread) per OVSDB server,
# shared by the drivers of a process.
_APIS = {}
_APIS_LOCK = threading.Lock()


def _connect(target, timeout):
    # Imported here: ovsdbapp takes a tenth of a second to import, which
    # a command that uses no Open vSwitch bridge never pays.
    from ovsdbapp.backend.ovs_idl import connection
    from ovsdbapp.backend.ovs_idl import idlutils
    from ovsdbapp.schema.open_vswitch import impl_idl
    with _APIS_LOCK:
        api = _APIS.get(target)
        if api is None:
            if target.startswith('unix:'):
                helper = idlutils.create_schema_helper(_rpc(
                    target[len('unix:'):], timeout, 'get_schema',
                    ['Open_vSwitch']))
            else:
                helper = idlutils.get_schema_helper(target, 'Open_vSwitch')
            for table, columns in COLUMNS.items():
                helper.register_columns(table, columns)
            idl = _threaded_idl_class()(target, helper)
            # ovsdbapp keeps one connection per API class: a class of
            # its own for each server.
            cls = type('OvsdbIdl', (impl_idl.OvsdbIdl,), {
                'create_transaction': _create_transaction,
                'del_port': _del_port})
            api = _APIS[target] = cls(connection.Connection(idl, timeout))
        return api


# The set-valued columns of COLUMNS: OVSDB's JSON gives a set of one as
# its bare element, which _select reads as a list of one.
_SETS = frozenset({'bridges', 'ports', 'interfaces'})


def _rpc(path, timeout, method, params):
    """The result of JSON-RPC request ``method`` to the OVSDB server on
    the unix socket ``path``, answered within ``timeout`` seconds;
    TimeoutError if it is not (the ovs library's blocking calls, which
    ovsdbapp fetches the schema with, wait for ever on a server that has
    stopped)."""
    import json
    import socket

    deadline = time.monotonic() + timeout
    decoder = json.JSONDecoder()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(json.dumps({'id': 0, 'method': method,
                                 'params': params}).encode())
        received, reply = b'', None
        while reply is None:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                raise TimeoutError('no answer from unix:%s in %s s' % (
                    path, timeout)) from None
            if not chunk:
                raise ConnectionError('unix:%s closed the connection '
                                      'before it answered' % path)
            received += chunk
            try:
                text = received.decode()
            except UnicodeDecodeError:
                continue  # a character cut in two
            # Messages come one after another; ours has our id.
            end = 0
            while reply is None:
                while text[end:end + 1].isspace():
                    end += 1
                try:
                    message, end = decoder.raw_decode(text, end)
                except ValueError:
                    break  # the rest is still coming
                if message.get('id') == 0 and 'method' not in message:
                    reply = message
    if reply.get('error') or 'result' not in reply:
        raise RuntimeError(str(reply.get('error')))
    return reply['result']


class TransactionFailed(RuntimeError):
    """An OVSDB transaction that failed; ``errors`` the names of its
    operations' errors (RFC 7047: ``timed out`` for a ``wait`` whose
    rows were not as given)."""

    def __init__(self, results):
        failed = [r for r in results if isinstance(r, dict) and 'error' in r]
        self.errors = [r['error'] for r in failed]
        super().__init__('; '.join('%s (%s)' % (r['error'],
                                                r.get('details', ''))
                                   for r in failed))


def _transact(path, timeout, operations):
    """The results of one OVSDB transaction of ``operations`` on the
    unix socket ``path`` (see _rpc); TransactionFailed if it failed."""
    results = _rpc(path, timeout, 'transact', ['Open_vSwitch', *operations])
    if not isinstance(results, list):
        raise RuntimeError('not a transaction\'s result: %r' % (results,))
    # An operation after a failed one is not attempted (null), and a
    # commit that fails adds an error of its own.
    if any(r is None or 'error' in r for r in results):
        raise TransactionFailed(results)
    return results


def _value(column, datum):
    """An OVSDB JSON ``datum`` of ``column`` as ovsdbapp's db_list gives
    it: maps as dicts, UUIDs as UUIDs, sets (a set of one, which OVSDB
    sends bare, too) as lists."""
    import uuid

    kind = datum[0] if isinstance(datum, list) else None
    if kind == 'map':
        return {k: _value(None, v) for k, v in datum[1]}
    if kind == 'set':
        return [_value(None, v) for v in datum[1]]
    if kind == 'uuid':
        datum = uuid.UUID(datum[1])
    return [datum] if column in _SETS else datum


def _decoded_row(columns, row):
    """A selected OVSDB JSON ``row`` of ``columns`` as a dict (_value)."""
    return {column: _value(column, row[column]) for column in columns}


def _select(path, timeout, tables):
    """{table: rows (dicts, as ovsdbapp's db_list gives them)}: every row
    of ``tables`` ({table: columns}), read in one OVSDB transaction on
    the unix socket ``path``, within ``timeout`` seconds.

    What an IDL would read first, without the IDL: its replica of a
    thousand nodes' ports and interfaces costs a fifth of a second of
    the interpreter to build and index (and the ovs library's RPC
    modules a twentieth to import), which a command that only reads (a
    re-run's inspection) never uses again.
    """
    results = _transact(path, timeout, [
        {'op': 'select', 'table': table, 'where': [],
         'columns': list(columns)} for table, columns in tables.items()])
    return {table: [_decoded_row(columns, row) for row in result['rows']]
            for (table, columns), result in zip(tables.items(), results,
                                                strict=True)}


def _select_named(path, timeout, table, names, columns):
    """The rows of ``table`` called ``names`` (absent ones left out), as
    _select gives them, read in one transaction."""
    results = _transact(path, timeout, [
        {'op': 'select', 'table': table, 'where': [['name', '==', name]],
         'columns': list(columns)} for name in names])
    return [_decoded_row(columns, row)
            for result in results for row in result['rows']]


@functools.cache
def _threaded_idl_class():
    """ovsdbapp's IDL less its cooperative yield.

    ovsdbapp's IDL sleeps for no time before each row of an update, for
    eventlet's sake. Threads need no such yield: each sleep hands the GIL
    to a busy thread, so the first dump of a thousand nodes' ports and
    interfaces took a second while the hostagent inspected domains and
    volumes beside it."""
    from ovsdbapp.backend.ovs_idl import connection

    class ThreadedIdl(connection.OvsdbIdl):
        def cooperative_yield(self):
            pass

    return ThreadedIdl


def _create_transaction(api, check_error=False, log_errors=True, **kwargs):
    """The API's transactions: ovsdbapp's ovs-vsctl transaction, which
    waits until ovs-vswitchd has applied it, less the wait.

    ovsdbapp waits in its connection thread, the one thread that runs
    every command of the API, so while ovs-vswitchd reconfigures (the
    userspace datapath takes longer the more ports a bridge has) every
    other lookup and transaction waited too: a thousand nodes' ports
    queued behind each other's reconfigurations. The caller waits
    instead (OpenvSwitchDriver._applied)."""
    return _ovsdbapp_classes()[0](api, api.ovsdb_connection,
                                  check_error=check_error,
                                  log_errors=log_errors)


def _del_port(api, port):
    """The API's del_port: ovsdbapp's, which reads the whole ``ports``
    column of the bridges to find the port's (a list of rows made
    afresh, and made again with each port a transaction removed before:
    a cost that grows with the ports and with the group commit), with a
    look-up in the column's committed set instead."""
    return _ovsdbapp_classes()[1](api, port)


@functools.cache
def _ovsdbapp_classes():
    """The transaction and del_port command classes above, made once, at
    first use: ovsdbapp is imported only where Open vSwitch is used."""
    from ovs.db import data
    from ovs.db import types
    from ovsdbapp.backend.ovs_idl import command
    from ovsdbapp.backend.ovs_idl import idlutils
    from ovsdbapp.backend.ovs_idl import transaction
    from ovsdbapp.schema.open_vswitch import impl_idl

    class Transaction(impl_idl.OvsVsctlTransaction):
        next_cfg = None
        interfaces = ()

        def post_commit(self, txn):
            transaction.Transaction.post_commit(self, txn)
            self.next_cfg = txn.get_increment_new_value()
            self.interfaces = [txn.get_insert_uuid(i)
                               for i in txn.expected_ifaces]

    class DelPort(command.BaseCommand):
        def __init__(self, api, port):
            super().__init__(api)
            self.port = port

        def run_idl(self, txn):
            row = idlutils.row_by_value(self.api.idl, 'Port', 'name',
                                        self.port, None)
            if row is None:
                return
            key = data.Atom(types.UuidType, row.uuid)
            for bridge in self.api.tables['Bridge'].rows.values():
                # python-ovs keeps a row's committed columns in _data.
                if key in bridge._data['ports'].values:
                    bridge.delvalue('ports', row)
            for interface in row.interfaces:
                interface.delete()
            row.delete()

    return Transaction, DelPort


def bridge_mac(name, owner):
    """A stable, locally administered unicast MAC for bridge ``name``."""
    # Of the deployment: a bridge made before marks named hostagents
    # keeps its MAC when it is made again.
    digest = hashlib.sha256(('%s/%s' % (tenks_names.deployment_mark(owner),
                                        name)).encode()).digest()
    octets = [(digest[0] & 0xfc) | 0x02] + list(digest[1:6])
    return ':'.join('%02x' % o for o in octets)


def _mark_reason(row, owner):
    """Why the OVSDB ``row`` is not ``owner``'s; None if it is."""
    mark = row['external_ids'].get(MARK)
    if tenks_names.owns(owner, mark):
        return None
    return ('it has no owner mark in Open vSwitch' if not mark
            else 'its owner mark is %r' % mark)


def _link_mark(name):
    """The alias of kernel link ``name`` ('' if none), None if absent."""
    try:
        with open(os.path.join(lb.SYSFS_NET, name, 'ifalias')) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def _is_linux_bridge(name):
    return os.path.isdir(os.path.join(lb.SYSFS_NET, name, 'bridge'))


def _is_up(name):
    with open(os.path.join(lb.SYSFS_NET, name, 'flags')) as f:
        return bool(int(f.read(), 16) & lb.IFF_UP)


def _has_master(name):
    return os.path.exists(os.path.join(lb.SYSFS_NET, name, 'master'))


class OpenvSwitchDriver(base.NetworkDriver):
    """Open vSwitch bridges and their ports, marked in external_ids."""

    def __init__(self, conf):
        super().__init__(conf)
        # Serialise check-then-create, as the Linux bridge driver does.
        self._lock = threading.Lock()
        self._port_locks = lockutils.Semaphores()
        self._commits = group_commit.GroupCommit(self._commit)
        # The same for transactions of OVSDB operations sent on the
        # server's socket (_direct).
        self._direct_commits = group_commit.GroupCommit(
            lambda operations: _transact(self._socket(), self._timeout(),
                                         operations))

    # -- OVSDB plumbing ----------------------------------------------------

    def _api(self):
        """The ovsdbapp API, connected at first use (a host that offers
        this driver but runs no Open vSwitch works for Linux bridges)."""
        target = self.conf.hostagent.ovsdb_connection
        if not self._running():
            raise exceptions.DriverError(
                driver=DRIVER, action='connect to %s' % target,
                reason='no OVSDB server listens there (is Open vSwitch '
                       'running? tools/setup.sh starts it)')
        try:
            return _connect(target, self.conf.hostagent.ovsdb_timeout)
        except Exception as e:
            raise exceptions.DriverError(
                driver=DRIVER, action='connect to %s' % target,
                reason=str(e) or type(e).__name__) from e

    def _running(self):
        """Whether an OVSDB server is there to ask (unix socket)."""
        target = self.conf.hostagent.ovsdb_connection
        return not target.startswith('unix:') or os.path.exists(
            target[len('unix:'):])

    def _direct(self):
        """Whether to ask OVSDB on its socket rather than through an IDL:
        a local server, and no IDL in this process yet. Building one
        means a copy of every port and interface of the bridges, which a
        process that only reads (a re-run's inspection) or only removes
        (a teardown) never uses."""
        target = self.conf.hostagent.ovsdb_connection
        return (target.startswith('unix:') and target not in _APIS
                and self._running())

    def _socket(self):
        return self.conf.hostagent.ovsdb_connection[len('unix:'):]

    def _timeout(self):
        return self.conf.hostagent.ovsdb_timeout

    @contextlib.contextmanager
    def _errors(self, action, *names):
        """Check interface names; turn failures into DriverError."""
        for name in names:
            if len(name) > tenks_names.IFNAMSIZ:
                raise exceptions.DriverError(
                    driver=DRIVER, action=action,
                    reason='interface name %s is longer than %d characters'
                           % (name, tenks_names.IFNAMSIZ))
        try:
            yield
        except exceptions.TenksError:
            raise
        except Exception as e:
            raise exceptions.DriverError(
                driver=DRIVER, action=action,
                reason=str(e) or type(e).__name__) from e

    def _rows(self, table, names=None, columns=('name', 'external_ids')):
        """Rows (dicts) of ``table``, those called ``names`` only if
        given (absent ones left out)."""
        if names is not None and not names:
            return []
        if names is not None and self._direct():
            return _select_named(self._socket(), self._timeout(), table,
                                 names, columns)
        api = self._api()
        if names is None:
            return api.db_list(table, None, columns=list(columns),
                               if_exists=True).execute(check_error=True)
        # Through the IDL's name index, under the lock its thread updates
        # it under: ovsdbapp's db_list given names reads every row of the
        # table, a cost per lookup that grows with the nodes' ports.
        from ovsdbapp.backend.ovs_idl import idlutils
        with api.ovsdb_connection.lock:
            rows = [idlutils.row_by_value(api.idl, table, 'name', name, None)
                    for name in names]
            return [{c: idlutils.get_column_value(row, c) for c in columns}
                    for row in rows if row is not None]

    def _tables(self, tables):
        """{table: rows (dicts)}: every row of ``tables`` ({table:
        columns}). From this process's IDL once it has one for the
        server; before that, one transaction (_select) on a local
        server's socket (_direct)."""
        if not self._direct():
            return {table: self._rows(table, columns=columns)
                    for table, columns in tables.items()}
        return _select(self._socket(), self._timeout(), tables)

    def _row(self, table, name, columns=('name', 'external_ids')):
        rows = self._rows(table, [name], columns)
        return rows[0] if rows else None

    def _owned(self, table, name, owner, columns=('name', 'external_ids')):
        """Our row ``name`` of ``table``, or None; ResourceConflict when
        it exists without our mark."""
        row = self._row(table, name, columns)
        if row is not None:
            reason = _mark_reason(row, owner)
            if reason:
                raise exceptions.ResourceConflict(
                    kind='Open vSwitch %s' % table.lower(), name=name,
                    owner=owner, reason=reason)
        return row

    def _bridge_of(self, port):
        """The name of the bridge port ``port`` is in, or None."""
        return self._api().port_to_br(port).execute(check_error=True)

    def _our_bridge(self, name, owner, action):
        row = self._owned('Bridge', name, owner,
                          ('name', 'external_ids', 'datapath_type'))
        if row is None:
            raise exceptions.DriverError(driver=DRIVER, action=action,
                                         reason='bridge %s does not exist'
                                                % name)
        return row

    def _transaction(self, *commands, applied=True):
        """Commit ``commands`` atomically, maybe in one transaction with
        other threads' (group_commit); return once ovs-vswitchd has
        applied them if ``applied``."""
        txn = self._commits.run(commands)
        if applied:
            self._applied(txn)

    def _commit(self, commands):
        with self._api().transaction(check_error=True) as txn:
            for command in commands:
                txn.add(command)
        return txn

    def _applied(self, txn):
        """Wait until ovs-vswitchd has applied the committed ``txn``;
        log the interfaces it could not add. As ovs-vsctl does, neither
        fails the request: the database holds the change, which
        ovs-vswitchd applies when it can (and to what was committed
        meanwhile with it: one reconfiguration for many ports)."""
        if txn.next_cfg is None:
            return  # it changed nothing (or was aborted): nothing to apply
        api = self._api()
        timeout = self.conf.hostagent.ovsdb_timeout
        deadline = time.monotonic() + timeout
        pause = 0.005
        while api.db_get('Open_vSwitch', '.', 'cur_cfg').execute(
                check_error=True) < txn.next_cfg:
            if time.monotonic() > deadline:
                LOG.warning('ovs-vswitchd has not applied an OVSDB '
                            'transaction after %d s', timeout)
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        failed = self._failed_interfaces(
            [uuid for uuid in txn.interfaces if uuid is not None])
        if failed:
            LOG.error('ovs-vswitchd failed to add the interfaces %s',
                      ', '.join(failed))

    def _failed_interfaces(self, uuids):
        """The names of the interfaces ``uuids`` that ovs-vswitchd could
        not add (OpenFlow port -1).

        Through the IDL's rows by UUID: ovsdbapp's db_list matches the
        records it is given with the table's index, the interfaces'
        names, so given UUIDs it read every interface of the bridge and
        found none, for each request."""
        from ovsdbapp.backend.ovs_idl import idlutils
        api = self._api()
        with api.ovsdb_connection.lock:
            rows = api.idl.tables['Interface'].rows
            return [row.name for row in map(rows.get, uuids)
                    if row is not None and idlutils.get_column_value(
                        row, 'ofport') in ([], -1, [-1])]

    def _add_port(self, bridge, name, owner, **interface):
        """Commands adding the marked port ``name`` to ``bridge``."""
        api = self._api()
        return [api.add_port(bridge, name, may_exist=False, **interface),
                api.db_set('Port', name, ('external_ids', {MARK: owner}))]

    # -- bridges -----------------------------------------------------------

    def ensure_bridge(self, name, owner):
        """See base; ``datapath_type`` from the hostagent's config."""
        action = 'create Open vSwitch bridge %s' % name
        with self._lock, self._errors(action, name):
            row = self._owned('Bridge', name, owner,
                              ('name', 'external_ids', 'other_config'))
            if row is not None:
                return base.ensured(False, mac=row['other_config'].get(
                    'hwaddr'))
            if _link_mark(name) is not None:
                raise exceptions.ResourceConflict(
                    kind='Interface', name=name, owner=owner,
                    reason='an interface of that name exists outside Open '
                           'vSwitch')
            mac = bridge_mac(name, owner)
            api = self._api()
            # One transaction: the bridge never exists without its mark,
            # and a bridge of that name made meanwhile fails it.
            self._transaction(
                api.add_br(name, may_exist=False,
                           datapath_type=self.conf.hostagent
                           .ovs_datapath_type),
                api.db_set('Bridge', name, ('external_ids', {MARK: owner}),
                           ('other_config', {'hwaddr': mac})))
            return base.ensured(True, mac=mac)

    def remove_bridge(self, name, owner):
        """See base; a bridge holding ports of somebody else is kept
        (ResourceConflict): deleting it would delete them."""
        with self._errors('delete Open vSwitch bridge %s' % name, name):
            if self._owned('Bridge', name, owner) is None:
                return False
            ports = self._api().list_ports(name).execute(check_error=True)
            foreign = sorted(
                row['name'] for row in self._rows('Port', ports)
                if _mark_reason(row, owner))
            if foreign:
                raise exceptions.ResourceConflict(
                    kind='Open vSwitch bridge', name=name, owner=owner,
                    reason='it holds ports that are not ours: %s'
                           % ', '.join(foreign))
            self._transaction(self._api().del_br(name))
        return True

    # -- uplinks -----------------------------------------------------------

    def ensure_uplink(self, bridge, source, veth_names, owner):
        """See base. ``source`` an Open vSwitch bridge: a pair of patch
        ports ``veth_names`` (ours, in ``bridge``; the peer, marked, in
        ``source``). A Linux bridge: a veth pair, the first end a port of
        ``bridge``, the second in ``source``. Anything else: ``source``
        becomes a port of ``bridge`` (``created``: this call did it)."""
        action = 'connect Open vSwitch bridge %s to %s' % (bridge, source)
        with self._lock, self._errors(action, bridge, source, *veth_names):
            ours = self._our_bridge(bridge, owner, action)
            src = self._row('Bridge', source, ('name', 'datapath_type'))
            if src is not None:
                return self._ensure_patch(ours, src, veth_names, owner,
                                          action)
            if _link_mark(source) is None:
                raise exceptions.InterfaceNotFound(name=source, physnet='?')
            if _is_linux_bridge(source):
                return self._ensure_veth(bridge, source, veth_names, owner,
                                         action)
            return self._ensure_plain(bridge, source, owner)

    def _ensure_patch(self, ours, src, peers, owner, action):
        if ours['datapath_type'] != src['datapath_type']:
            raise exceptions.DriverError(
                driver=DRIVER, action=action,
                reason='patch ports join bridges of one datapath type: '
                       '%s has %r, %s %r' % (
                           ours['name'], ours['datapath_type'] or 'system',
                           src['name'], src['datapath_type'] or 'system'))
        wanted = {peers[0]: (ours['name'], peers[1]),
                  peers[1]: (src['name'], peers[0])}
        found = {row['name']: row for row in self._rows(
            'Interface', peers, ('name', 'type', 'options'))}
        ports = {name: self._owned('Port', name, owner) for name in peers}
        if all(ports.values()) and all(
                self._bridge_of(name) == where
                and found.get(name, {}).get('type') == 'patch'
                and found[name]['options'].get('peer') == peer
                for name, (where, peer) in wanted.items()):
            return base.ensured(False)
        api = self._api()
        commands = [api.del_port(name) for name, row in ports.items() if row]
        for name, (where, peer) in wanted.items():
            commands += self._add_port(where, name, owner, type='patch',
                                       options={'peer': peer})
        self._transaction(*commands)
        return base.ensured(not any(ports.values()), True)

    def _ensure_veth(self, bridge, source, veth_names, owner, action):
        with lb.iproute() as ipr:
            ends = [lb._owned(ipr, n, owner, 'veth') for n in veth_names]
            if ends.count(None) == 1:
                raise exceptions.DriverError(
                    driver=DRIVER, action=action,
                    reason='veth %s exists without its peer %s' % (
                        (veth_names if ends[1] is None
                         else veth_names[::-1])))
            port = self._owned('Port', veth_names[0], owner)
            created = ends[0] is None
            if created:
                with lb._adding('%s or %s' % tuple(veth_names), owner):
                    ipr.link('add', ifname=veth_names[0], kind='veth',
                             peer=veth_names[1])
            with lb._undone_on_error(ipr,
                                     veth_names[0] if created else None):
                if created:
                    ends = [lb._get(ipr, n) for n in veth_names]
                src = lb._get(ipr, source)
                changed = lb._configure(ipr, ends[0], owner=owner)
                changed = lb._configure(ipr, ends[1], src['index'],
                                        owner) or changed
                changed = self._port_in(bridge, veth_names[0], port,
                                        owner) or changed
        return base.ensured(created, changed)

    def _port_in(self, bridge, name, port, owner):
        """Make our port ``name`` (row ``port``, None if absent) a port of
        ``bridge``; whether that changed anything."""
        if port is not None and self._bridge_of(name) == bridge:
            return False
        api = self._api()
        self._transaction(*([api.del_port(name)] if port else [])
                          + self._add_port(bridge, name, owner))
        return True

    def _ensure_plain(self, bridge, source, owner):
        port = self._owned('Port', source, owner)
        if port is None and _has_master(source):
            raise exceptions.ResourceConflict(
                kind='Interface', name=source, owner=owner,
                reason='it is enslaved to another master')
        changed = self._port_in(bridge, source, port, owner)
        return base.ensured(port is None, changed)

    def remove_uplink(self, bridge, source, veth_names, owner):
        """See base: our patch ports, veth pair or port of ``source``
        go; everything is checked before anything is removed."""
        action = 'disconnect Open vSwitch bridge %s from %s' % (bridge,
                                                                source)
        with self._errors(action, bridge, source, *veth_names):
            ports = [name for name in veth_names
                     if self._owned('Port', name, owner) is not None]
            # The source is not ours: its port goes only if we made it
            # in our bridge.
            src = self._row('Port', source)
            if (src is not None and not _mark_reason(src, owner)
                    and self._bridge_of(source) == bridge):
                ports.append(source)
            with lb.iproute() as ipr:
                ends = [lb._owned(ipr, n, owner, 'veth')
                        for n in veth_names]
                if ports:
                    api = self._api()
                    self._transaction(*(api.del_port(name)
                                        for name in ports))
                removed = bool(ports)
                for name, end in zip(veth_names, ends, strict=True):
                    # Deleting one end deletes the other.
                    if end is not None and lb._get(ipr, name) is not None:
                        ipr.link('del', index=end['index'])
                        removed = True
        return removed

    # -- node ports --------------------------------------------------------

    def ensure_port(self, bridge, name, owner):
        """See base; the persistent tap ``name`` as a port of ``bridge``."""
        action = 'create tap %s in Open vSwitch bridge %s' % (name, bridge)
        with self._errors(action, bridge, name), lb.iproute() as ipr:
            with self._port_locks.get(name):
                self._our_bridge(bridge, owner, action)
                port = self._owned('Port', name, owner)
                link = lb._owned(ipr, name, owner, 'tun')
                created = link is None
                if created:
                    with lb._adding(name, owner):
                        lb._add_tap(name)
            # The port's transaction outside the lock, so that other
            # nodes' ports made meanwhile join it.
            with lb._undone_on_error(ipr, name if created else None):
                if created:
                    link = lb._get(ipr, name)
                changed = lb._configure(ipr, link, owner=owner)
                changed = self._port_in(bridge, name, port,
                                        owner) or changed
            return base.ensured(created, changed)

    def remove_port(self, name, owner):
        """See base: the port and the tap, both checked first.

        No wait for ovs-vswitchd: the tap goes next, and nothing needs
        the port gone from the datapath first. A process with no IDL
        yet (a teardown's) builds none for it (_direct): at a thousand
        nodes, building it held up the first removal by most of a second
        (while the hostagent's other threads were busy), and each second
        counts, since ovs-vswitchd, which then removes the ports one at a
        time, is what a teardown waits for."""
        with self._errors('delete tap %s' % name, name):
            direct = self._direct()
            port = (self._owned('Port', name, owner,
                                ('name', 'external_ids', '_uuid'))
                    if self._running() else None)
            link = lb.sysfs_owned(name, owner, 'tun')
            if port is not None and direct:
                port = self._delete_port(port, owner)
            elif port is not None:
                self._transaction(self._api().del_port(name), applied=False)
            if link is not None:
                lb.delete_link(link)
        return port is not None or link is not None

    def _delete_port(self, port, owner):
        """Delete our Port row ``port`` (its interfaces go with it) in a
        transaction on the server's socket, which holds only if the row
        still has the mark read (an OVSDB ``wait``). A port changed
        meanwhile is read again: another's is kept (ResourceConflict),
        one gone is not ours to report. The port deleted, or None."""
        for _ in range(3):
            uuid = ['uuid', str(port['_uuid'])]
            try:
                self._direct_commits.run([
                    {'op': 'wait', 'table': 'Port', 'timeout': 0,
                     'where': [['_uuid', '==', uuid]],
                     'columns': ['external_ids'], 'until': '==',
                     'rows': [{'external_ids': [
                         'map', sorted(port['external_ids'].items())]}]},
                    # Ports are not a root table: a port no bridge
                    # holds is deleted, with its interfaces.
                    {'op': 'mutate', 'table': 'Bridge',
                     'where': [['ports', 'includes', uuid]],
                     'mutations': [['ports', 'delete', uuid]]}])
                return port
            except TransactionFailed as e:
                if 'timed out' not in e.errors:
                    raise
            port = self._owned('Port', port['name'], owner,
                               ('name', 'external_ids', '_uuid'))
            if port is None:
                return None
        raise RuntimeError('port %s changed each time it was to be '
                           'deleted' % port['name'])

    def remove_veth(self, name, owner):
        return lb.remove_veth(name, owner)

    def marked(self):
        """See base: the marked links (see LinuxBridgeDriver.marked), and
        the bridges and ports of Open vSwitch that carry our key in
        their external_ids (none when it does not run)."""
        found = lb.marked_links()
        if not self._running():
            return found
        with self._errors('read Open vSwitch marks'):
            read = self._tables({
                'Port': ('name', 'external_ids', '_uuid'),
                'Bridge': ('name', 'external_ids', 'ports')})
        ports, bridges = read['Port'], read['Bridge']
        named = {row['_uuid']: row['name'] for row in ports}
        holder = {uuid: br['name'] for br in bridges for uuid in br['ports']}
        found += [{'kind': 'bridge', 'bridge_type': DRIVER,
                   'name': br['name'], 'mark': br['external_ids'][MARK],
                   'master': None,
                   'ports': sorted(named[uuid] for uuid in br['ports']
                                   if uuid in named)}
                  for br in bridges if br['external_ids'].get(MARK)]
        found += [{'kind': 'ovs port', 'name': row['name'],
                   'mark': row['external_ids'][MARK],
                   'bridge': holder.get(row['_uuid'])}
                  for row in ports if row['external_ids'].get(MARK)]
        return found

    def port_changes(self, ports, owner):
        """See base; one read of the ports and bridges, and each tap's
        alias and flags from sysfs."""
        with self._errors('read Open vSwitch ports'):
            read = self._tables({
                'Port': ('name', 'external_ids', '_uuid'),
                'Bridge': ('name', 'external_ids', 'ports')})
            rows = {row['name']: row for row in read['Port']}
            bridges = read['Bridge']
        holder = {uuid: br['name'] for br in bridges for uuid in br['ports']}
        bridges = {br['name']: br for br in bridges}
        changes = {}
        for wanted in ports:
            tap, bridge = wanted['tap'], bridges.get(wanted['bridge'])
            row, mark = rows.get(tap), _link_mark(tap)
            if row is None and mark is None:
                changes[tap] = None
            elif (row is not None and _mark_reason(row, owner)) or (
                    mark is not None and not (
                        tenks_names.owns(owner, mark) and os.path.exists(
                            os.path.join(lb.SYSFS_NET, tap, 'tun_flags')))):
                changes[tap] = states.PART_FOREIGN
            elif bridge is None or _mark_reason(bridge, owner):
                changes[tap] = ['bridge %s missing or not ours'
                                % wanted['bridge']]
            else:
                changes[tap] = self._tap_changes(
                    tap, mark, row and holder.get(row['_uuid']),
                    wanted['bridge'])
        return changes

    @staticmethod
    def _tap_changes(tap, mark, bridge, wanted):
        found = []
        if mark is None:
            found.append('tap missing')
        elif not _is_up(tap):
            found.append('state down')
        if bridge != wanted:
            found.append('port in %s' % bridge if bridge
                         else 'no Open vSwitch port')
        return found

    def bridge_changes(self, names, owner):
        """See base; one read of the bridges."""
        with self._errors('read Open vSwitch bridges'):
            # Every bridge (there are few), as port_changes reads them.
            rows = {row['name']: row for row in self._tables({
                'Bridge': ('name', 'external_ids')})['Bridge']}
        return {name: None if name not in rows
                else states.PART_FOREIGN if _mark_reason(rows[name], owner)
                else [] for name in names}

    def marks(self, names):
        """See base: the marks of Open vSwitch bridges and ports among
        ``names`` ('' for one without), read at once. None without an
        Open vSwitch to ask: then a Linux bridge cluster's checks go on,
        and an Open vSwitch one fails at its first bridge, saying why."""
        if not names or not self._running():
            return {}
        try:
            with self._errors('read Open vSwitch marks'):
                read = self._tables({'Port': ('name', 'external_ids'),
                                     'Bridge': ('name', 'external_ids')})
        except exceptions.DriverError as e:
            LOG.warning('Not reading Open vSwitch marks: %s', e)
            return {}
        wanted = set(names)
        # A bridge's own port has its name: the bridge's mark wins.
        return {row['name']: row['external_ids'].get(MARK, '')
                for table in ('Port', 'Bridge') for row in read[table]
                if row['name'] in wanted}
