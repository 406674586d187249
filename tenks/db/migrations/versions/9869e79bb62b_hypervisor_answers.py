"""A hypervisor is used once its hostagent has answered the conductor

Revision ID: 9869e79bb62b
Revises: 6bc7c1c53956
Create Date: 2026-12-02 09:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = '9869e79bb62b'
down_revision = '6bc7c1c53956'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('tenks_hypervisors', schema=None) as batch_op:
        batch_op.add_column(sa.Column('answered_at', sa.DateTime(),
                                      nullable=True))


def downgrade():
    with op.batch_alter_table('tenks_hypervisors', schema=None) as batch_op:
        batch_op.drop_column('answered_at')
