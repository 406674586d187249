"""alembic environment: migrations run on the connection the caller
passes in ``config.attributes['connection']`` (see tenks.db.migration)."""

from alembic import context

from tenks.db import migration
from tenks.db import models


def include_name(name, type_, parent_names):
    # TaskFlow's tables share the database; they are not ours to manage.
    return type_ != 'table' or name.startswith(migration.TABLE_PREFIX)


context.configure(
    connection=context.config.attributes['connection'],
    target_metadata=models.metadata,
    version_table=migration.VERSION_TABLE,
    include_name=include_name,
    # SQLite alters tables by copying them; batch mode does that.
    render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
