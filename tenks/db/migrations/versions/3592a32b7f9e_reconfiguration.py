"""Reconfiguration: node creation times (a shrink removes the newest), and
a deploy's plan and spec on its operation.

Revision ID: 3592a32b7f9e
Revises: 29ab870c33a8
Create Date: 2026-11-30 23:28:28.528638
"""

import sqlalchemy as sa
from alembic import op

revision = '3592a32b7f9e'
down_revision = '29ab870c33a8'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('tenks_nodes', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('created_at', sa.DateTime(), nullable=True)
        )

    with op.batch_alter_table('tenks_operations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('plan', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('spec', sa.JSON(), nullable=True))



def downgrade():
    with op.batch_alter_table('tenks_operations', schema=None) as batch_op:
        batch_op.drop_column('spec')
        batch_op.drop_column('plan')

    with op.batch_alter_table('tenks_nodes', schema=None) as batch_op:
        batch_op.drop_column('created_at')

