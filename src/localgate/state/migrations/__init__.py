"""Alembic migrations of the shared state schema."""
