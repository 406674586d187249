"""Host aggregates and availability zones, and why a hypervisor
is disabled.

Revision ID: 5c4e1a7d2b90
Revises: 0d93986b573d
Create Date: 2026-12-01 02:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = '5c4e1a7d2b90'
down_revision = '0d93986b573d'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('tenks_hypervisors', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('disabled_reason', sa.Text(), nullable=True))
    op.create_table(
        'tenks_aggregates',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('availability_zone', sa.String(length=255),
                  nullable=True),
        sa.Column('metadata', sa.JSON(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('uuid'),
        sa.UniqueConstraint('name'),
    )
    op.create_table(
        'tenks_aggregate_hosts',
        sa.Column('aggregate_id', sa.Integer(), nullable=False),
        sa.Column('host', sa.String(length=255), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['aggregate_id'], ['tenks_aggregates.id']),
        sa.PrimaryKeyConstraint('aggregate_id', 'host'),
    )


def downgrade():
    op.drop_table('tenks_aggregate_hosts')
    op.drop_table('tenks_aggregates')
    with op.batch_alter_table('tenks_hypervisors', schema=None) as batch_op:
        batch_op.drop_column('disabled_reason')
