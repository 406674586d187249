"""Events and operations indexed by time, for the retention's prune

Revision ID: 4d8a1f6c2e73
Revises: b3f1c0d2a4e5
Create Date: 2026-12-03 17:10:00
"""

from alembic import op

revision = '4d8a1f6c2e73'
down_revision = 'b3f1c0d2a4e5'
branch_labels = None
depends_on = None

# What every conductor start deletes by: (table, column).
TIMES = (('tenks_events', 'timestamp'), ('tenks_operations', 'finished_at'))


def upgrade():
    for table, column in TIMES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.create_index(batch_op.f('ix_%s_%s' % (table, column)),
                                  [column], unique=False)


def downgrade():
    for table, column in TIMES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(batch_op.f('ix_%s_%s' % (table, column)))
