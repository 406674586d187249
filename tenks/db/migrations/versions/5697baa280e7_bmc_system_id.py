"""A node's BMC system id; Redfish nodes share an endpoint

Revision ID: 5697baa280e7
Revises: 5c4e1a7d2b90
Create Date: 2026-12-01 02:06:29.571418
"""

import sqlalchemy as sa
from alembic import op

revision = '5697baa280e7'
down_revision = '5c4e1a7d2b90'
branch_labels = None
depends_on = None

OLD_COLUMNS = ['hypervisor', 'bmc_address', 'bmc_port']
# SQLite reflects the initial revision's unnamed constraints without a
# name: batch mode names them by this convention so they can be dropped.
CONVENTION = {'uq': 'uq_%(table_name)s_%(column_0_N_name)s'}


def _old_constraint():
    """The name the database gave the old (unnamed) constraint."""
    for constraint in sa.inspect(op.get_bind()).get_unique_constraints(
            'tenks_nodes'):
        if constraint['column_names'] == OLD_COLUMNS:
            return constraint['name'] or 'uq_tenks_nodes_' + '_'.join(
                OLD_COLUMNS)
    return None


def upgrade():
    old = _old_constraint()
    with op.batch_alter_table(
        'tenks_nodes', schema=None, naming_convention=CONVENTION
    ) as batch_op:
        batch_op.add_column(
            sa.Column('bmc_system_id', sa.String(length=64), nullable=True)
        )
        if old:
            batch_op.drop_constraint(old, type_='unique')
        batch_op.create_unique_constraint(
            'uq_tenks_nodes_bmc',
            ['hypervisor', 'bmc_address', 'bmc_port', 'bmc_system_id'],
        )


def downgrade():
    with op.batch_alter_table('tenks_nodes', schema=None) as batch_op:
        batch_op.drop_constraint('uq_tenks_nodes_bmc', type_='unique')
        batch_op.drop_column('bmc_system_id')
        batch_op.create_unique_constraint(
            'uq_tenks_nodes_hypervisor_bmc_address_bmc_port', OLD_COLUMNS
        )
