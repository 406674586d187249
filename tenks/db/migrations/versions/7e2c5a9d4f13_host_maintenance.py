"""A hypervisor in maintenance: disabled, its nodes moved away

Revision ID: 7e2c5a9d4f13
Revises: 5697baa280e7
Create Date: 2026-12-01 05:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = '7e2c5a9d4f13'
down_revision = '5697baa280e7'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('tenks_hypervisors', schema=None) as batch_op:
        batch_op.add_column(sa.Column('maintenance', sa.Boolean(),
                                      nullable=False,
                                      server_default=sa.false()))


def downgrade():
    with op.batch_alter_table('tenks_hypervisors', schema=None) as batch_op:
        batch_op.drop_column('maintenance')
