"""alembic migrations of the state database (see tenks.db.migration)."""

# The newest revision, for readers that must not import alembic (the
# read-only CLI commands); tests/unit/test_db.py keeps it alembic's head.
HEAD = '4d8a1f6c2e73'
VERSION_TABLE = 'tenks_alembic_version'
