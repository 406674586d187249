"""alembic migrations of the state database (see tenks.db.migration)."""

# The newest revision, for readers that must not import alembic (the
# read-only CLI commands); tests/unit/test_db.py keeps it alembic's head.
HEAD = 'f2544cca09b1'
VERSION_TABLE = 'tenks_alembic_version'
