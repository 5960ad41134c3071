"""A PostgreSQL schema of a test's own, for the audit store's PostgreSQL tests.

Needs a PostgreSQL server: LOCALGATE_TEST_POSTGRES_DSN (default: the local server with
trust auth, database ``test``). Skipped when none answers, except under CI=true, where
these tests must run.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

import pytest

POSTGRES_DSN = os.environ.get(
    "LOCALGATE_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)


@contextlib.contextmanager
def postgres_schema() -> Iterator[str]:
    """A DSN whose search_path is a new schema, dropped afterwards."""
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(POSTGRES_DSN, autocommit=True)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no PostgreSQL at {POSTGRES_DSN}: {exc}")
    schema = f"lg_test_{secrets.token_hex(6)}"
    admin.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in POSTGRES_DSN else "?"
    try:
        yield f"{POSTGRES_DSN}{separator}options=-csearch_path%3D{schema}"
    finally:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()


@pytest.fixture
def dsn() -> Iterator[str]:
    """A DSN into a PostgreSQL schema of this test's own."""
    with postgres_schema() as found:
        yield found
