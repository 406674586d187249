"""alembic migrations of the state database (see tenks.db.migration)."""

# The newest revision, for readers that must not import alembic (the
# read-only CLI commands); tests/unit/test_db.py keeps it alembic's head.
HEAD = 'b3f1c0d2a4e5'
VERSION_TABLE = 'tenks_alembic_version'
