"""Times to the microsecond on MySQL (its DATETIME kept whole seconds)

Revision ID: f2544cca09b1
Revises: 9869e79bb62b
Create Date: 2026-12-02 03:21:22.978526
"""

from alembic import op

revision = 'f2544cca09b1'
down_revision = '9869e79bb62b'
branch_labels = None
depends_on = None

# (table, column, nullable) of every time the schema holds.
TIMES = (
    ('tenks_clusters', 'created_at', False),
    ('tenks_clusters', 'updated_at', False),
    ('tenks_nodes', 'created_at', True),
    ('tenks_resources', 'created_at', False),
    ('tenks_unanswered_requests', 'created_at', False),
    ('tenks_operations', 'created_at', False),
    ('tenks_operations', 'finished_at', True),
    ('tenks_hypervisors', 'last_seen', False),
    ('tenks_hypervisors', 'answered_at', True),
    ('tenks_aggregates', 'created_at', False),
    ('tenks_aggregates', 'updated_at', False),
    ('tenks_aggregate_hosts', 'created_at', False),
    ('tenks_events', 'timestamp', False),
)


def _alter(fsp):
    # Other databases keep microseconds already.
    if op.get_bind().dialect.name != 'mysql':
        return
    from sqlalchemy.dialects import mysql
    for table, column, nullable in TIMES:
        op.alter_column(table, column, type_=mysql.DATETIME(fsp=fsp),
                        existing_nullable=nullable)


def upgrade():
    _alter(6)


def downgrade():
    _alter(0)
