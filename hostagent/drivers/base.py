"""Interfaces of the hypervisor drivers the hostagent loads with stevedore.

Every ``ensure_*`` is idempotent and returns a dict (see
:func:`ensured`): ``created`` is True iff this call made the thing (it
did not exist before), ``changed`` is True iff it made or fixed
anything; some add facts (a bridge's MAC). When the thing already exists
as asked and carries the same owner, nothing is redone. An ``ensure_*``
that fails undoes what it created before raising, so a failed request
leaves nothing of its own behind.

Every ``remove_*`` is idempotent too: it returns True when it removed
something, False when there was nothing to remove.

An existing thing that belongs to somebody else (no owner mark, or
another owner's) is never adopted, changed or removed: ``ensure_*`` and
``remove_*`` raise :class:`tenks.exceptions.ResourceConflict` and touch
nothing.

``owner`` is the mark a deployment puts on what it creates, an opaque
string compared for equality: ``tenks:<cluster>:<deployment uuid>``
(:func:`tenks.names.owner`), so a same-named cluster of another state
database is somebody else.
"""

import abc

from tenks import units

# The header of a download that carries a ``source``'s token (a volume
# that another hostagent serves for a move: hostagent.transfer).
TOKEN_HEADER = 'X-Tenks-Transfer-Token'


def whole_sectors(capacity):
    """``capacity`` bytes rounded up to whole sectors, as volumes get."""
    return -(-int(capacity) // units.SECTOR_SIZE) * units.SECTOR_SIZE


def ensured(created, changed=False, **facts):
    """The result of an ``ensure_*``: ``created``, ``changed``, facts."""
    return dict(facts, created=bool(created),
                changed=bool(created or changed))


class VirtDriver(abc.ABC):
    """Storage pools, volumes and domains of one hypervisor."""

    def __init__(self, conf):
        self.conf = conf

    @abc.abstractmethod
    def facts(self):
        """Return facts about the hypervisor as a JSON-able dict.

        Keys: ``libvirt_version`` (str), ``cpus`` (int), ``memory_mb``
        (int: the host's total memory, MemTotal, steady between
        registrations), ``firmware`` (what it can boot: 'bios', 'uefi',
        'secure_boot'; optional, BIOS only without it), ``machines`` and
        ``cpu_modes`` ({domain type: [machine types, aliases first]} and
        {domain type: [CPU modes]} of x86_64 domains; optional, no node
        that names them without). Raises HypervisorUnavailable when
        libvirt cannot be reached, naming the URI.
        """

    @abc.abstractmethod
    def check_pool_devices(self, name, devices, owner, wipe=()):
        """Raise DeviceRefused, naming each device and what it found,
        unless the volume group of logical pool ``name`` may take the
        block ``devices`` (symbolic links resolved): whole disks that
        nothing uses (no partition, not mounted, no holders), holding
        no signature and no data in their first MiB, except those in
        ``wipe`` (data there may be wiped). Physical volumes of the
        group of that name, if it is ``owner``'s, are the pool's
        already. Reads only."""

    @abc.abstractmethod
    def ensure_pool(self, name, path, owner, pool_type='dir', devices=(),
                    wipe=()):
        """A storage pool ``name``, active.

        ``pool_type`` 'dir': a directory at ``path``; 'logical': an LVM
        volume group ``name`` built on the block ``devices``, ``path``
        its /dev directory, checked first as check_pool_devices does
        (the devices of ``wipe`` are wiped). The pool and its directory
        or group carry ``owner``'s mark; a pool of that name or at that
        path, or a directory or group there, without it:
        ResourceConflict.
        """

    @abc.abstractmethod
    def remove_pool(self, name, path, owner, pool_type='dir', devices=()):
        """Destroy and undefine the pool and remove its directory, or its
        volume group and the physical volumes on ``devices``; DriverError
        while it holds volumes of ``owner``'s deployment."""

    @abc.abstractmethod
    def ensure_volume(self, pool, name, capacity, fmt, owner, source=None):
        """A volume of ``capacity`` bytes and format ``fmt`` in ``pool``.

        The volume carries ``owner``'s mark; a volume of that name in
        the pool without it: ResourceConflict. ``source`` ({'path' or
        'url' (with its 'token', sent in TOKEN_HEADER), 'backing'}): made
        from that image, copied, or (backing) on it as its copy-on-write
        backing file; an image larger than ``capacity`` is an error.
        """

    @abc.abstractmethod
    def volume_path(self, pool, name, owner):
        """The path of our volume ``name`` (a file or a block device),
        for a move to copy it; DriverError when there is none."""

    @abc.abstractmethod
    def existing_volumes(self, pool, names):
        """{name: {'capacity', 'format'} or None} of volumes that are not
        Tenks' (attached as they are); None when absent. With ``owner``
        or ``pool_owner``, the Tenks owner mark the volume or its pool
        carries, if any: then it is Tenks' after all."""

    @abc.abstractmethod
    def remove_volume(self, pool, name, owner):
        """Delete the volume."""

    @abc.abstractmethod
    def volume_info(self, pool, name, owner):
        """``{'capacity': bytes, 'format'}`` of the volume (and
        ``backing``, the path of its backing file, if it has one), None
        if absent.

        ResourceConflict when it is not ``owner``'s.
        """

    @abc.abstractmethod
    def volume_infos(self, pool, names, owner):
        """{name: volume_info or PART_FOREIGN} of the volumes ``names`` of
        ``pool``, read at once; never raises for one volume."""

    @abc.abstractmethod
    def resize_volume(self, pool, name, capacity, owner):
        """Grow the volume to ``capacity`` bytes (whole sectors).

        Returns True if it grew, False if it had that size already. A
        volume larger than ``capacity``: ResourceConflict (volumes are
        never shrunk); an absent one: DriverError.
        """

    @abc.abstractmethod
    def ensure_domain(self, domain, owner):
        """A defined (not started) domain as described by ``domain``.

        ``domain`` keys: name, uuid, vcpus, memory_mb, domain_type
        ('qemu' or 'kvm'), disks ([{pool, volume, format, device
        ('disk' or 'cdrom', default disk), backing (the path of its
        backing file, if any)}]), nics
        ([{mac, tap}]), console_log_enabled (bool). When it is true, the
        serial console is logged to
        ``<console_log_dir>/<name>-console.log`` (tenks.conf), or to
        ``console_log`` (a path in console_log_dir, or None: no log)
        when the key is there. Optional: boot_mode ('bios', the default,
        or 'uefi') and secure_boot (bool); a UEFI domain gets an NVRAM
        file of its own, marked as ``owner``'s, which remove_domain
        removes. Firmware missing for them: DriverError. Optional too:
        cpu_mode and machine (a machine type, an alias or versioned);
        DriverError when the hypervisor lacks them. virtual_media
        (bool): an empty CD-ROM drive for a Redfish BMC's virtual media.
        """

    @abc.abstractmethod
    def remove_domain(self, name, owner):
        """Stop the domain if it runs, undefine it, delete its NVRAM
        file and (unless [hostagent] keep_console_logs) its log."""

    @abc.abstractmethod
    def domain_changes(self, domain, owner):
        """What ensure_domain would change, as phrases for an operator.

        None when the domain is not defined, [] when it is as described.
        ResourceConflict when it is not ``owner``'s.
        """

    @abc.abstractmethod
    def domains_changes(self, domains, owner):
        """{name: domain_changes or PART_FOREIGN} of several domains, read at
        once; a change of UUID is a change, not an error."""

    @abc.abstractmethod
    def check_domain(self, name, owner):
        """Raise ResourceConflict unless the domain ``name`` is
        ``owner``'s (a BMC drives only such a domain), DriverError when
        it is not defined."""

    @abc.abstractmethod
    def start_domain(self, name, owner):
        """Start the domain; True if it was not running."""

    @abc.abstractmethod
    def stop_domain(self, name, owner):
        """Power the domain off at once; True if it was running."""

    @abc.abstractmethod
    def domain_state(self, name):
        """Return 'running', 'shut off', ... or None when undefined."""

    @abc.abstractmethod
    def marked(self):
        """Everything here that carries a Tenks owner mark, whoever's,
        read at once and changing nothing: [{'kind', 'name', 'mark',
        ...}] of kind 'domain' (with its 'state'), 'pool' (its 'path',
        'pool_type', 'devices', 'active' and 'defined': False for a
        marked directory of pool_dir that no pool uses), 'volume' (its
        'pool': Tenks makes volumes in its own pools only, which are
        the ones read) and 'nvram' (a file of nvram_dir, named after
        its domain)."""

    @abc.abstractmethod
    def remove_nvram(self, name, owner):
        """Delete the NVRAM file of domain ``name`` in nvram_dir if it is
        ``owner``'s (remove_domain takes a domain's own along); whether
        it did."""


class NetworkDriver(abc.ABC):
    """Bridges that stand for physical networks, and the ports on them."""

    def __init__(self, conf):
        self.conf = conf

    @abc.abstractmethod
    def ensure_bridge(self, name, owner):
        """A bridge ``name``, up; its result has its MAC (``mac``)."""

    @abc.abstractmethod
    def remove_bridge(self, name, owner):
        """Delete the bridge."""

    @abc.abstractmethod
    def ensure_uplink(self, bridge, source, veth_names, owner):
        """Connect ``bridge`` to the existing interface ``source``.

        ``source`` a bridge: a veth pair ``veth_names`` (bridge end,
        source end) links the two. ``source`` any other interface: it is
        enslaved to ``bridge`` directly (``created``: this call did it).
        Raises InterfaceNotFound when ``source`` does not exist.
        """

    @abc.abstractmethod
    def remove_uplink(self, bridge, source, veth_names, owner):
        """Undo ensure_uplink: delete the veth pair or release source."""

    @abc.abstractmethod
    def ensure_port(self, bridge, name, owner):
        """A persistent tap ``name`` in ``bridge`` for a node's NIC."""

    @abc.abstractmethod
    def remove_port(self, name, owner):
        """Delete the tap."""

    @abc.abstractmethod
    def port_changes(self, ports, owner):
        """What ensure_port would change of each of ``ports`` ([{'tap',
        'bridge'}]), read at once: {tap: None when absent, PART_FOREIGN, or
        phrases ([] when as asked)}."""

    @abc.abstractmethod
    def remove_veth(self, name, owner):
        """Delete the veth pair of which ``name`` is an end, once both
        ends are found to be ``owner``'s veths: an uplink's, left without
        the record remove_uplink would be asked from. Whether it did."""

    @abc.abstractmethod
    def marked(self):
        """Everything this driver's kind of network holds that carries a
        Tenks owner mark, whoever's, read at once and changing nothing:
        [{'kind', 'name', 'mark', ...}]. The links Tenks makes, marked by
        their alias: 'bridge' (a Linux bridge, its 'ports'), 'port' (a
        node's tap) and 'veth' (an uplink's end, its 'peer'), each with
        its 'master'; and what a driver marks elsewhere: 'bridge' with
        'bridge_type' (another driver's, its 'ports'), 'ovs port' (an
        Open vSwitch port, its 'bridge')."""

    def bridge_changes(self, names, owner):
        """{name: None when absent, PART_FOREIGN, or [] when ours} of those of
        the bridges ``names`` this driver can read at once; reads only.
        Bridges it leaves out are judged by port_changes alone."""
        return {}

    def marks(self, names):
        """{name: owner mark ('' for none)} of those of ``names`` this
        driver keeps marks for outside the interfaces' aliases (which
        the hostagent reads itself); reads only."""
        return {}


class BmcDriver(abc.ABC):
    """Emulated BMCs in front of domains.

    Each BMC records the ``owner`` it was made for (the hostagent's mark
    for a deployment); a BMC of the domain recorded for anybody else is
    never changed or removed: ResourceConflict. The caller checks that
    the domain itself is the owner's (VirtDriver.check_domain).
    """

    def __init__(self, conf):
        self.conf = conf

    @abc.abstractmethod
    def ensure_bmc(self, domain, address, port, username, password,
                   owner):
        """A running BMC for ``domain`` listening on ``address:port``,
        recorded as ``owner``'s.

        Returns only once the BMC answers on its port. Raises
        PortInUse when something else holds the port.
        """

    @abc.abstractmethod
    def remove_bmc(self, domain, owner):
        """Stop and delete ``owner``'s BMC of ``domain``; stop the daemon
        once it serves none."""

    @abc.abstractmethod
    def list_bmcs(self):
        """Return [{'domain', 'address', 'port', 'status'}]."""

    @abc.abstractmethod
    def marked(self):
        """The BMCs of this hostagent's state directory, each with the
        owner mark it was made for: [{'kind': 'bmc', 'name' (its
        domain), 'mark', 'address', 'port'}]."""

    @abc.abstractmethod
    def daemons(self):
        """The processes serving IPMI BMCs on this machine, of every
        state directory (each carries the directory it serves in its
        environment): [{'kind', 'directory', 'pids', 'orphan'}].
        ``orphan`` says why its processes serve what no Tenks has any
        more (the directory is gone, or names another process as its
        own; then ``pids`` are those), or is None."""

    @abc.abstractmethod
    def stop_orphans(self, directory):
        """Stop the processes serving ``directory`` that are orphans (see
        daemons), judged again as it stops them; the pids stopped."""

    @abc.abstractmethod
    def set_fault(self, domain, owner, fault):
        """Make ``owner``'s BMC of ``domain`` show ``fault``
        (tenks.bmc_faults; None: none) until told otherwise, across
        restarts; removing the BMC removes its fault. Whether anything
        changed. DriverError when there is no such BMC to fault (a fault
        cleared where there is none changes nothing)."""

    @abc.abstractmethod
    def bmc_changes(self, bmcs, owner):
        """What ensure_bmc would change of each BMC, read at once.

        ``bmcs``: {domain: {'address', 'port', 'username', 'password'}}.
        Returns {domain: None when absent (or not served: the daemon is
        down), PART_FOREIGN when made for another owner, or phrases ([] when
        as asked; 'stopped' when it does not run)}. Starts nothing.
        """


class RedfishDriver(abc.ABC):
    """Redfish endpoints in front of domains: an emulator per owner (a
    cluster's deployment) on this hypervisor, serving only that owner's
    systems, behind HTTP basic auth."""

    def __init__(self, conf):
        self.conf = conf

    @abc.abstractmethod
    def ensure_system(self, owner, domain, system_id, address, port,
                      username, password):
        """``owner``'s emulator, running on ``address:port`` with these
        credentials, serving the system ``system_id`` (the UUID of
        ``domain``) among its others.

        Returns once the emulator answers on its port. Raises PortInUse
        when something else holds the port.
        """

    @abc.abstractmethod
    def remove_system(self, domain, owner):
        """Stop serving ``domain`` in ``owner``'s emulator (never in
        another's); stop the emulator and remove its files once it
        serves none. True if it served the domain."""

    @abc.abstractmethod
    def set_fault(self, domain, owner, fault):
        """As BmcDriver.set_fault, for the system of ``domain`` in
        ``owner``'s emulator."""

    @abc.abstractmethod
    def system_changes(self, owner, systems):
        """What ensure_system would change of each system, read at once.

        ``systems``: {domain: {'system_id', 'address', 'port',
        'username', 'password'}}. Returns {domain: None when not served,
        or phrases ([] when as asked; 'stopped' when the emulator does
        not run)}. Starts nothing.
        """

    @abc.abstractmethod
    def marked(self):
        """The emulators of this hostagent's state directory:
        [{'kind': 'emulator', 'name' (its directory's), 'mark' (its
        owner's), 'systems' ({domain: system id}), 'running'}]."""

    @abc.abstractmethod
    def daemons(self):
        """The processes serving Redfish systems on this machine, of every
        state directory (each carries the directory it serves in its
        environment): [{'kind', 'directory', 'pids', 'orphan'}].
        ``orphan`` says why its processes serve what no Tenks has any
        more (the directory is gone, or names another process as its
        own; then ``pids`` are those), or is None."""

    @abc.abstractmethod
    def stop_orphans(self, directory):
        """Stop the processes serving ``directory`` that are orphans (see
        daemons), judged again as it stops them; the pids stopped."""

    @abc.abstractmethod
    def endpoint_user(self, address, port):
        """Who holds TCP ``address:port``: None (free), the owner of one
        of our emulators, or '' (another process)."""


class SnmpDriver(abc.ABC):
    """SNMP power outlets of domains: a PDU per owner (a cluster's
    deployment) on this hypervisor, an outlet for each of its domains,
    behind an SNMP community."""

    def __init__(self, conf):
        self.conf = conf

    @abc.abstractmethod
    def ensure_outlet(self, owner, domain, outlet, address, port,
                      community):
        """``owner``'s PDU, answering on UDP ``address:port`` to
        ``community``, with outlet ``outlet`` powering ``domain``.

        Returns once the PDU has its port. Raises PortInUse when
        something else holds the port.
        """

    @abc.abstractmethod
    def remove_outlet(self, domain, owner):
        """Unplug ``domain`` from ``owner``'s PDU (never another's); stop
        the PDU and remove its files once it powers none. True if it
        had an outlet."""

    @abc.abstractmethod
    def set_fault(self, domain, owner, fault):
        """As BmcDriver.set_fault, for the outlet of ``domain`` on
        ``owner``'s PDU."""

    @abc.abstractmethod
    def outlet_changes(self, owner, outlets):
        """What ensure_outlet would change of each outlet, read at once.

        ``outlets``: {domain: {'outlet', 'address', 'port',
        'community'}}. Returns {domain: None when it has no outlet, or
        phrases ([] when as asked; 'stopped' when the PDU does not
        run)}. Starts nothing.
        """

    @abc.abstractmethod
    def marked(self):
        """The PDUs of this hostagent's state directory: [{'kind': 'pdu',
        'name' (its directory's), 'mark' (its owner's), 'systems'
        ({domain: outlet}), 'running'}]."""

    @abc.abstractmethod
    def daemons(self):
        """The PDU processes of every state directory, as
        RedfishDriver.daemons."""

    @abc.abstractmethod
    def stop_orphans(self, directory):
        """Stop the orphan PDU processes of ``directory`` (see
        daemons); the pids stopped."""
