"""What Tenks created, recorded as it is created.

Teardown works from these rows, never from a spec recomputed later.

The tables are SQLAlchemy Core tables, and a row is read into a plain
record of its columns: the ORM would add a twentieth of a second to
every command's start, for objects that are only read.
"""

import datetime
import types

import sqlalchemy as sa

metadata = sa.MetaData()

# Spec keys whose values callers never see.
SECRETS = ('ipmi_password', 'redfish_password', 'snmp_community')


def mask_spec(spec):
    """``spec`` with its passwords masked (None stays None)."""
    if not spec:
        return spec
    return dict(spec, **{key: '***' for key in SECRETS if key in spec})


def now():
    return datetime.datetime.now(datetime.timezone.utc)


class DateTime(sa.types.TypeDecorator):
    """A time, to the microsecond on every database: MySQL's DATETIME
    keeps whole seconds unless told otherwise, and what happened in one
    second would come in any order (operations, registrations after a
    conductor's start)."""

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect):
        if dialect.name == 'mysql':
            # Loaded with the dialect: nothing to import otherwise.
            from sqlalchemy.dialects.mysql import DATETIME
            return dialect.type_descriptor(DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime())


def _column(name, type_, nullable=False, **kwargs):
    return sa.Column(name, type_, nullable=nullable, **kwargs)


def _created():
    return _column('created_at', DateTime(), default=now)


class Record(types.SimpleNamespace):
    """A row as read: its columns as attributes."""

    table = None

    @classmethod
    def from_row(cls, row):
        return None if row is None else cls(**row._mapping)

    def as_dict(self):
        """The row as JSON-serialisable data."""
        return {c.name: _json(getattr(self, c.name)) for c in self.table.c}


class Cluster(Record):
    table = sa.Table(
        'tenks_clusters', metadata,
        _column('name', sa.String(64), primary_key=True),
        # The deployment: owner marks name it, so a same-named cluster of
        # another state database owns nothing of this one. A cluster torn
        # down and deployed again is a new deployment.
        _column('uuid', sa.String(36), unique=True),
        _column('spec', sa.JSON()),
        _column('state', sa.String(16)),
        _created(),
        _column('updated_at', DateTime(), default=now, onupdate=now))

    def as_dict(self):
        """The row for callers: the spec's BMC password masked."""
        row = super().as_dict()
        row['spec'] = mask_spec(row['spec'])
        return row


class Node(Record):
    """A node's allocation: its names, MACs and BMC port stay stable."""

    table = sa.Table(
        'tenks_nodes', metadata,
        _column('uuid', sa.String(36), primary_key=True),
        _column('cluster', sa.String(64), index=True),
        _column('name', sa.String(64)),
        _column('hypervisor', sa.String(255)),
        _column('node_type', sa.String(64)),
        _column('spec_index', sa.Integer()),
        _column('vcpus', sa.Integer()),
        _column('memory_mb', sa.Integer()),
        _column('volumes', sa.JSON()),
        _column('nics', sa.JSON()),
        _column('bmc_type', sa.String(16)),
        _column('bmc_address', sa.String(64)),
        _column('bmc_port', sa.Integer()),
        # Redfish: the system's id at the endpoint (the domain's UUID);
        # SNMP: its outlet number on the cluster's PDU.
        _column('bmc_system_id', sa.String(64), nullable=True),
        # Its firmware: bios or uefi, and UEFI secure boot.
        _column('boot_mode', sa.String(8), default='bios',
                server_default='bios'),
        _column('secure_boot', sa.Boolean(), default=False,
                server_default=sa.false()),
        # The file its serial console is logged to on its hypervisor, or
        # None (none, or recorded before Tenks recorded it).
        _column('console_log', sa.String(4096), nullable=True),
        # The fault its BMC shows on request (tenks.bmc_faults), or None.
        _column('bmc_fault', sa.JSON(), nullable=True),
        _column('state', sa.String(16)),
        # A count that goes down removes the newest nodes first.
        _column('created_at', DateTime(), nullable=True, default=now),
        sa.UniqueConstraint('hypervisor', 'name'),
        # One endpoint per BMC: an IPMI port, a Redfish emulator's
        # system (Redfish nodes of a host share its address and port),
        # or an outlet of a PDU.
        # IPMI nodes have no system id (NULL): the scheduler keeps their
        # ports apart.
        sa.UniqueConstraint('hypervisor', 'bmc_address', 'bmc_port',
                            'bmc_system_id', name='uq_tenks_nodes_bmc'))


class Resource(Record):
    """One thing created on a hypervisor, and how to remove it."""

    table = sa.Table(
        'tenks_resources', metadata,
        _column('id', sa.Integer(), primary_key=True),
        _column('cluster', sa.String(64), index=True),
        _column('hypervisor', sa.String(255)),
        _column('kind', sa.String(16)),
        _column('name', sa.String(255)),
        # Keyword arguments of the hostagent's remove_<kind>.
        _column('remove_args', sa.JSON()),
        # 'creating' from just before the request until the agent
        # confirms.
        _column('state', sa.String(16)),
        # The operation that created it (None: it existed, ours, before
        # the operation that recorded it): a revert removes only its own.
        _column('operation', sa.String(36), nullable=True),
        # The node it belongs to, if any: a node is forgotten only once
        # none of its resources remains recorded.
        _column('node', sa.String(36), nullable=True, index=True),
        _column('data', sa.JSON(), default=dict),
        _created(),
        sa.UniqueConstraint('hypervisor', 'kind', 'name'))


class UnansweredRequest(Record):
    """A thing an agent request acts on, after its conductor gave up
    waiting for the answer (the agent may have begun it before its
    deadline): what the answer, should it still come, does to the thing's
    record (conductor.late)."""

    table = sa.Table(
        'tenks_unanswered_requests', metadata,
        _column('id', sa.Integer(), primary_key=True),
        _column('request_id', sa.String(255), index=True),
        _column('operation', sa.String(36), nullable=True),
        _column('cluster', sa.String(64), index=True),
        _column('hypervisor', sa.String(255)),
        _column('kind', sa.String(16)),
        _column('name', sa.String(255)),
        # 'ensure': the answer says it exists; 'remove': that it is gone.
        _column('effect', sa.String(8)),
        _created())


class Operation(Record):
    table = sa.Table(
        'tenks_operations', metadata,
        _column('id', sa.String(36), primary_key=True),
        _column('cluster', sa.String(64), index=True),
        _column('kind', sa.String(16)),
        _column('state', sa.String(16)),
        # The conductor running it, which resumes it after a restart.
        _column('conductor', sa.String(255)),
        # {stage: [tasks done, tasks in all]}
        _column('progress', sa.JSON(), default=dict),
        # {'changed': [tasks that changed something], 'resumed': bool}
        _column('result', sa.JSON(), default=dict),
        _column('error', sa.Text(), nullable=True),
        # A deploy's plan (tenks.reconcile.plan), which its flow is built
        # from again on resume, and the spec it applies (the cluster's
        # record gets it when the flow succeeds).
        _column('plan', sa.JSON(), nullable=True),
        _column('spec', sa.JSON(), nullable=True),
        _created(),
        # Indexed, as events' timestamps are: the retention's prune
        # otherwise reads past every operation's plan to find it.
        _column('finished_at', DateTime(), nullable=True, index=True))

    def as_dict(self):
        """The row for callers: no plan, the spec's BMC password masked."""
        row = super().as_dict()
        del row['plan']
        row['spec'] = mask_spec(row['spec'])
        return row


class Hypervisor(Record):
    """A hostagent as it registered, and when it was last heard of."""

    table = sa.Table(
        'tenks_hypervisors', metadata,
        _column('host', sa.String(255), primary_key=True),
        _column('facts', sa.JSON()),
        _column('enabled', sa.Boolean(), default=True),
        _column('last_seen', DateTime()),
        # Why an operator disabled it ("tenks hypervisor set --disable
        # --reason").
        _column('disabled_reason', sa.Text(), nullable=True),
        # In maintenance ("tenks hypervisor maintenance start"): disabled,
        # and its nodes moved to other hosts of its aggregates.
        _column('maintenance', sa.Boolean(), default=False,
                server_default=sa.false()),
        # When its hostagent answered a request the conductor sent it
        # since it last came up (None: not yet); only then is it used.
        _column('answered_at', DateTime(), nullable=True))


class Aggregate(Record):
    """A host aggregate: a named group of hypervisors with metadata,
    in at most one availability zone."""

    table = sa.Table(
        'tenks_aggregates', metadata,
        _column('id', sa.Integer(), primary_key=True),
        _column('uuid', sa.String(36), unique=True),
        _column('name', sa.String(255), unique=True),
        _column('availability_zone', sa.String(255), nullable=True),
        _column('metadata', sa.JSON(), default=dict),
        _created(),
        _column('updated_at', DateTime(), default=now, onupdate=now))


class AggregateHost(Record):
    """A hypervisor's membership of an aggregate."""

    table = sa.Table(
        'tenks_aggregate_hosts', metadata,
        sa.Column('aggregate_id', sa.Integer(),
                  sa.ForeignKey('tenks_aggregates.id'), nullable=False,
                  primary_key=True),
        _column('host', sa.String(255), primary_key=True),
        _created())


class Event(Record):
    """A lifecycle notification, as sent on the bus."""

    table = sa.Table(
        'tenks_events', metadata,
        _column('id', sa.Integer(), primary_key=True),
        # Indexed: every conductor start (every embedded command) deletes
        # those older than the retention; a scan of the table took 80 ms
        # with 100,000 events.
        _column('timestamp', DateTime(), default=now, index=True),
        _column('event_type', sa.String(64)),
        _column('priority', sa.String(8)),
        _column('cluster', sa.String(64), index=True),
        _column('payload', sa.JSON()))


def _json(value):
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value
