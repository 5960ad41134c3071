"""Alembic migrations of the audit database (SQLite and PostgreSQL)."""
