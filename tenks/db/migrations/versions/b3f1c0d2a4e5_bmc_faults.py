"""The fault a node's BMC shows on request

Revision ID: b3f1c0d2a4e5
Revises: f2544cca09b1
Create Date: 2026-12-02 13:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = 'b3f1c0d2a4e5'
down_revision = 'f2544cca09b1'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('tenks_nodes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('bmc_fault', sa.JSON(), nullable=True))


def downgrade():
    with op.batch_alter_table('tenks_nodes', schema=None) as batch_op:
        batch_op.drop_column('bmc_fault')
