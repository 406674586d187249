"""Agent requests given up on: what their answers still do to the
record.

Revision ID: 6bc7c1c53956
Revises: 7e2c5a9d4f13
Create Date: 2026-12-01 16:48:13
"""

import sqlalchemy as sa
from alembic import op

revision = '6bc7c1c53956'
down_revision = '7e2c5a9d4f13'
branch_labels = None
depends_on = None

TABLE = 'tenks_unanswered_requests'


def upgrade():
    op.create_table(
        TABLE,
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('request_id', sa.String(length=255), nullable=False),
        sa.Column('operation', sa.String(length=36), nullable=True),
        sa.Column('cluster', sa.String(length=64), nullable=False),
        sa.Column('hypervisor', sa.String(length=255), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('effect', sa.String(length=8), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table(TABLE, schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_%s_cluster' % TABLE),
                              ['cluster'], unique=False)
        batch_op.create_index(batch_op.f('ix_%s_request_id' % TABLE),
                              ['request_id'], unique=False)


def downgrade():
    with op.batch_alter_table(TABLE, schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_%s_request_id' % TABLE))
        batch_op.drop_index(batch_op.f('ix_%s_cluster' % TABLE))
    op.drop_table(TABLE)
