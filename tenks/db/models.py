"""What Tenks created, recorded as it is created.

Teardown works from these rows, never from a spec recomputed later.
"""

import datetime

import sqlalchemy as sa
from sqlalchemy import orm

# Spec keys whose values callers never see.
SECRETS = ('ipmi_password', 'redfish_password')


def mask_spec(spec):
    """``spec`` with its passwords masked (None stays None)."""
    if not spec:
        return spec
    return dict(spec, **{key: '***' for key in SECRETS if key in spec})


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


class Base(orm.DeclarativeBase):
    type_annotation_map = {dict: sa.JSON, list: sa.JSON}

    def as_dict(self):
        """The row as JSON-serialisable data."""
        return {c.name: _json(getattr(self, c.name))
                for c in self.__table__.c}


class Cluster(Base):
    __tablename__ = 'tenks_clusters'

    name: orm.Mapped[str] = orm.mapped_column(sa.String(64),
                                              primary_key=True)
    # The deployment: owner marks name it, so a same-named cluster of
    # another state database owns nothing of this one. A cluster torn
    # down and deployed again is a new deployment.
    uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36), unique=True)
    spec: orm.Mapped[dict]
    state: orm.Mapped[str] = orm.mapped_column(sa.String(16))
    created_at: orm.Mapped[datetime.datetime] = orm.mapped_column(
        default=_now)
    updated_at: orm.Mapped[datetime.datetime] = orm.mapped_column(
        default=_now, onupdate=_now)

    def as_dict(self):
        """The row for callers: the spec's BMC password masked."""
        row = super().as_dict()
        row['spec'] = mask_spec(row['spec'])
        return row


class Node(Base):
    """A node's allocation: its names, MACs and BMC port stay stable."""

    __tablename__ = 'tenks_nodes'
    __table_args__ = (
        sa.UniqueConstraint('hypervisor', 'name'),
        # One endpoint per BMC: an IPMI port, or a Redfish emulator's
        # system (Redfish nodes of a host share its address and port).
        # IPMI nodes have no system id (NULL): the scheduler keeps their
        # ports apart.
        sa.UniqueConstraint('hypervisor', 'bmc_address', 'bmc_port',
                            'bmc_system_id', name='uq_tenks_nodes_bmc'),
    )

    uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36),
                                              primary_key=True)
    cluster: orm.Mapped[str] = orm.mapped_column(sa.String(64), index=True)
    name: orm.Mapped[str] = orm.mapped_column(sa.String(64))
    hypervisor: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    node_type: orm.Mapped[str] = orm.mapped_column(sa.String(64))
    spec_index: orm.Mapped[int]
    vcpus: orm.Mapped[int]
    memory_mb: orm.Mapped[int]
    volumes: orm.Mapped[list]
    nics: orm.Mapped[list]
    bmc_type: orm.Mapped[str] = orm.mapped_column(sa.String(16))
    bmc_address: orm.Mapped[str] = orm.mapped_column(sa.String(64))
    bmc_port: orm.Mapped[int]
    # Redfish: the system's id at the endpoint (the domain's UUID).
    bmc_system_id: orm.Mapped[str | None] = orm.mapped_column(sa.String(64))
    state: orm.Mapped[str] = orm.mapped_column(sa.String(16))
    # A count that goes down removes the newest nodes first.
    created_at: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        default=_now)


class Resource(Base):
    """One thing created on a hypervisor, and how to remove it."""

    __tablename__ = 'tenks_resources'
    __table_args__ = (sa.UniqueConstraint('hypervisor', 'kind', 'name'),)

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    cluster: orm.Mapped[str] = orm.mapped_column(sa.String(64), index=True)
    hypervisor: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    kind: orm.Mapped[str] = orm.mapped_column(sa.String(16))
    name: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    # Keyword arguments of the hostagent's remove_<kind>.
    remove_args: orm.Mapped[dict]
    # 'creating' from just before the request until the agent confirms.
    state: orm.Mapped[str] = orm.mapped_column(sa.String(16))
    # The operation that created it (None: it existed, ours, before the
    # operation that recorded it): a revert removes only its own.
    operation: orm.Mapped[str | None] = orm.mapped_column(sa.String(36))
    # The node it belongs to, if any: a node is forgotten only once none
    # of its resources remains recorded.
    node: orm.Mapped[str | None] = orm.mapped_column(sa.String(36),
                                                     index=True)
    data: orm.Mapped[dict] = orm.mapped_column(default=dict)
    created_at: orm.Mapped[datetime.datetime] = orm.mapped_column(
        default=_now)


class Operation(Base):
    __tablename__ = 'tenks_operations'

    def as_dict(self):
        """The row for callers: no plan, the spec's BMC password masked."""
        row = super().as_dict()
        del row['plan']
        row['spec'] = mask_spec(row['spec'])
        return row

    id: orm.Mapped[str] = orm.mapped_column(sa.String(36), primary_key=True)
    cluster: orm.Mapped[str] = orm.mapped_column(sa.String(64), index=True)
    kind: orm.Mapped[str] = orm.mapped_column(sa.String(16))
    state: orm.Mapped[str] = orm.mapped_column(sa.String(16))
    # The conductor running it, which resumes it after a restart.
    conductor: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    # {stage: [tasks done, tasks in all]}
    progress: orm.Mapped[dict] = orm.mapped_column(default=dict)
    # {'changed': [tasks that changed something], 'resumed': bool}
    result: orm.Mapped[dict] = orm.mapped_column(default=dict)
    error: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
    # A deploy's plan (tenks.reconcile.plan), which its flow is built from
    # again on resume, and the spec it applies (the cluster's record gets
    # it when the flow succeeds).
    plan: orm.Mapped[dict | None]
    spec: orm.Mapped[dict | None]
    created_at: orm.Mapped[datetime.datetime] = orm.mapped_column(
        default=_now)
    finished_at: orm.Mapped[datetime.datetime | None]


class Hypervisor(Base):
    """A hostagent as it registered, and when it was last heard of."""

    __tablename__ = 'tenks_hypervisors'

    host: orm.Mapped[str] = orm.mapped_column(sa.String(255),
                                              primary_key=True)
    facts: orm.Mapped[dict]
    enabled: orm.Mapped[bool] = orm.mapped_column(default=True)
    last_seen: orm.Mapped[datetime.datetime]


class Event(Base):
    """A lifecycle notification, as sent on the bus."""

    __tablename__ = 'tenks_events'

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    timestamp: orm.Mapped[datetime.datetime] = orm.mapped_column(
        default=_now)
    event_type: orm.Mapped[str] = orm.mapped_column(sa.String(64))
    priority: orm.Mapped[str] = orm.mapped_column(sa.String(8))
    cluster: orm.Mapped[str] = orm.mapped_column(sa.String(64), index=True)
    payload: orm.Mapped[dict]


def _json(value):
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value
