"""Data keys in the audit database, wrapped by the master key; cached unwrapped in memory."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from localgate.audit.crypto import CipherSuite, DecryptionError, MasterKey
from localgate.audit.database import Database

__all__ = ["KeyDestroyed", "Keyring"]


class KeyDestroyed(DecryptionError):
    """The data key was destroyed by retention: the payload is gone for good."""


class Keyring:
    """Finds or creates data keys; one per tenant, purpose and period."""

    def __init__(self, db: Database, master: MasterKey, suite: CipherSuite) -> None:
        self._db = db
        self._master = master
        self._suite = suite
        self._cache: dict[tuple[str, str, str], tuple[str, bytes]] = {}
        self._by_id: dict[str, bytes] = {}

    def current(self, tenant: str, purpose: str, period: str) -> tuple[str, bytes]:
        """(key id, key) for writing; created in the caller's transaction if missing."""
        cached = self._cache.get((tenant, purpose, period))
        if cached is not None:
            return cached
        row = self._db.execute(
            "SELECT key_id, wrapped FROM audit_keys WHERE tenant=? AND purpose=? AND period=?",
            (tenant, purpose, period),
        ).fetchone()
        if row is not None and row[1] is not None:
            key_id, key = row[0], self._master.unwrap(row[1], row[0])
        elif row is not None:
            raise KeyDestroyed(f"the {purpose} key of {tenant} for {period} was destroyed")
        else:
            key_id = f"{purpose[0]}-{secrets.token_hex(8)}"
            key = self._suite.new_key()
            self._db.execute(
                "INSERT INTO audit_keys (key_id, tenant, purpose, period, wrapped, master_key_id,"
                " created_at) VALUES (?,?,?,?,?,?,?)",
                (
                    key_id,
                    tenant,
                    purpose,
                    period,
                    self._master.wrap(key, key_id),
                    self._master.key_id,
                    _now(),
                ),
            )
        self._cache[(tenant, purpose, period)] = (key_id, key)
        self._by_id[key_id] = key
        return key_id, key

    def by_id(self, key_id: str) -> bytes:
        """The key with this id, for reading; ``KeyDestroyed`` after retention."""
        key = self._by_id.get(key_id)
        if key is not None:
            return key
        row = self._db.execute(
            "SELECT wrapped FROM audit_keys WHERE key_id=?", (key_id,)
        ).fetchone()
        if row is None:
            raise DecryptionError(f"no audit key {key_id}")
        if row[0] is None:
            raise KeyDestroyed(f"audit key {key_id} was destroyed by retention")
        key = self._master.unwrap(row[0], key_id)
        self._by_id[key_id] = key
        return key

    def unwrap_problem(self) -> str | None:
        """None if the master key opens the stored data keys, else which it cannot open.

        One key per wrapping master key is tried (``rotate-key`` rewraps them all, so
        normally there is one): a replica started with another master key would refuse
        every request whose period already has a key.
        """
        rows = self._db.execute(
            "SELECT master_key_id, MIN(key_id) FROM audit_keys WHERE wrapped IS NOT NULL "
            "GROUP BY master_key_id ORDER BY master_key_id"
        ).fetchall()
        for master_key_id, key_id in rows:
            wrapped = self._db.execute(
                "SELECT wrapped FROM audit_keys WHERE key_id=?", (key_id,)
            ).fetchone()[0]
            try:
                self._master.unwrap(wrapped, key_id)
            except DecryptionError:
                return (
                    f"the audit master key (id {self._master.key_id}) cannot unwrap the data "
                    f"keys wrapped by master key {master_key_id} (data key {key_id}); start "
                    "the gateway with that master key"
                )
        return None

    def forget(self) -> None:
        """Drop cached keys (after destroying some)."""
        self._cache.clear()
        self._by_id.clear()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
