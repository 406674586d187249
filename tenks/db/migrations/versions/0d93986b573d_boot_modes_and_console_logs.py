"""Each node's boot mode, secure boot and console log path.

Revision ID: 0d93986b573d
Revises: 3592a32b7f9e
Create Date: 2026-12-01 02:09:48.230641
"""

import sqlalchemy as sa
from alembic import op

revision = '0d93986b573d'
down_revision = '3592a32b7f9e'
branch_labels = None
depends_on = None


def upgrade():
    # Nodes recorded before are BIOS nodes; their log path is unknown.
    with op.batch_alter_table('tenks_nodes', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                'boot_mode',
                sa.String(length=8),
                server_default='bios',
                nullable=False,
            )
        )
        batch_op.add_column(
            sa.Column(
                'secure_boot',
                sa.Boolean(),
                server_default=sa.false(),
                nullable=False,
            )
        )
        batch_op.add_column(
            sa.Column('console_log', sa.String(length=4096), nullable=True)
        )


def downgrade():
    with op.batch_alter_table('tenks_nodes', schema=None) as batch_op:
        batch_op.drop_column('console_log')
        batch_op.drop_column('secure_boot')
        batch_op.drop_column('boot_mode')
