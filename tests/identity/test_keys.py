"""Tenant keys: hashed at rest, constant-time checks, revocation seen by a running gateway."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from localgate.errors import PermissionDenied, Unauthenticated
from localgate.identity import Principal, SqliteKeyStore


@pytest.fixture
def store(tmp_path: Path) -> SqliteKeyStore:
    return SqliteKeyStore(tmp_path / "state.db")


def test_created_key_authenticates_as_its_tenant(store: SqliteKeyStore) -> None:
    issued = store.create("acme", "billing app")

    assert store.authenticate(issued.key.reveal()) == Principal("acme", issued.key_id)
    assert "lg_" not in repr(issued)


def test_only_a_hash_is_stored(store: SqliteKeyStore, tmp_path: Path) -> None:
    issued = store.create("acme")
    # lg_<id>_<secret>: URL-safe base64, which may hold (or end with) "_" itself, so it is
    # read from the left; from the right it could be a short tail, or empty.
    secret = issued.key.reveal().split("_", 2)[2]
    assert len(secret) >= 40

    # The WAL file holds recent rows until a checkpoint: read every file of the database.
    raw = b"".join(path.read_bytes() for path in tmp_path.glob("state.db*"))
    with sqlite3.connect(tmp_path / "state.db") as db:
        dumped = "\n".join(db.iterdump())

    assert secret.encode() not in raw
    assert secret not in dumped


@pytest.mark.parametrize("presented", [None, "", "garbage", "lg_zz_yy"])
def test_malformed_keys_are_unauthenticated(store: SqliteKeyStore, presented: str | None) -> None:
    with pytest.raises(Unauthenticated):
        store.authenticate(presented)


def test_right_id_wrong_secret_is_unauthenticated(store: SqliteKeyStore) -> None:
    issued = store.create("acme")
    forged = f"lg_{issued.key_id}_{'A' * 43}"

    with pytest.raises(Unauthenticated):
        store.authenticate(forged)


def test_revocation_by_another_connection_takes_effect_immediately(
    store: SqliteKeyStore, tmp_path: Path
) -> None:
    issued = store.create("acme")
    store.authenticate(issued.key.reveal())  # now cached

    cli = SqliteKeyStore(tmp_path / "state.db")
    assert cli.revoke(issued.key_id) is True
    cli.close()

    with pytest.raises(PermissionDenied, match=issued.key_id):
        store.authenticate(issued.key.reveal())


def test_list_and_revoke_unknown(store: SqliteKeyStore) -> None:
    first = store.create("acme", "one")
    store.create("globex", "two")
    store.revoke(first.key_id)

    records = store.list()
    assert [(r.tenant, r.label, r.revoked_at is not None) for r in records] == [
        ("acme", "one", True),
        ("globex", "two", False),
    ]
    assert [r.tenant for r in store.list("globex")] == ["globex"]
    assert store.revoke("0000000000000000") is False


@pytest.mark.parametrize("tenant", ["", "-x", "a b", "x" * 65, "租户"])
def test_tenant_names_are_validated(store: SqliteKeyStore, tenant: str) -> None:
    with pytest.raises(ValueError, match="tenant"):
        store.create(tenant)
