"""Tenant keys in the shared state database (PostgreSQL), for replicas behind one name.

A key created or revoked on one replica is honoured by every replica within one second.
Verified keys are cached in memory; a thread per store polls one row, a counter that a
trigger bumps in the same transaction as any change to ``api_keys`` (by a gateway, the CLI
or by hand), every ``POLL_INTERVAL_S``, and the cache is dropped when it moved. Why polling
and not LISTEN/NOTIFY: a notification sent while a replica's listening connection is down
is lost for good, so NOTIFY would still need a poll to be safe; a poll alone bounds the delay
whatever happened in between, at the cost of a few one-row reads a second.

Fail closed: the cache is trusted only while polls succeed. If none has succeeded for
``STALE_AFTER_S`` (database down, poller stuck), every request reads its key from the
database, which answers (and sees a revocation) or fails the request with 503.
"""

from __future__ import annotations

import threading
from typing import Any

from localgate.errors import ServiceUnavailable
from localgate.exchange.principal import Principal
from localgate.identity.keys import (
    _DUMMY_DIGEST,
    ApiKeyRecord,
    IssuedKey,
    _now,
    authenticate_with,
    new_key,
)
from localgate.state.generations import POLL_INTERVAL_S, STALE_AFTER_S, GenerationWatch
from localgate.state.migrate import prepare_schema
from localgate.state.postgres import StateConnection, StateDatabaseUnavailable

__all__ = ["POLL_INTERVAL_S", "STALE_AFTER_S", "PostgresKeyStore"]


class PostgresKeyStore:
    """Keys in PostgreSQL (``database_url``), shared by every replica."""

    def __init__(self, dsn: str, *, poll: bool = True, migrate: bool = True) -> None:
        # Used from the event loop's thread only (requests) or the CLI. Connected first: an
        # unreachable database is reported as such, not as a failed migration.
        self._db = StateConnection(dsn)
        if migrate:
            try:
                prepare_schema(dsn)
            except StateDatabaseUnavailable:
                self._db.close()
                raise
        self._cache: dict[str, tuple[bytes, Principal | None]] = {}
        self._lock = threading.Lock()
        self._cached_generation: int | None = None
        # Revocations reach every replica through the api_keys change counter.
        try:
            self.watch = GenerationWatch(dsn, "api_keys", what="key store") if poll else None
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        """Stop polling and close the connection."""
        if self.watch is not None:
            self.watch.close()
        self._db.close()

    # -- administration (CLI) -------------------------------------------------

    def create(self, tenant: str, label: str = "") -> IssuedKey:
        """Create a key for ``tenant``; the returned secret is not stored anywhere."""
        issued, digest = new_key(tenant)
        self._run(
            "INSERT INTO api_keys (key_id, tenant, label, digest, created_at) "
            "VALUES (%s,%s,%s,%s,%s)",
            (issued.key_id, tenant, label, digest, _now()),
        )
        return issued

    def list(self, tenant: str | None = None) -> list[ApiKeyRecord]:
        """All keys, optionally of one tenant, oldest first."""
        query = "SELECT key_id, tenant, label, created_at, revoked_at FROM api_keys"
        params: tuple[str, ...] = ()
        if tenant is not None:
            query += " WHERE tenant = %s"
            params = (tenant,)
        rows = self._run(query + " ORDER BY position", params).fetchall()
        return [ApiKeyRecord(*row) for row in rows]

    def revoke(self, key_id: str) -> bool:
        """Revoke a key; False if no such key (revoking twice is not an error)."""
        cursor = self._run(
            "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, %s) WHERE key_id = %s",
            (_now(), key_id),
        )
        return int(cursor.rowcount) > 0

    # -- request path ---------------------------------------------------------

    def authenticate(self, presented: str | None) -> Principal:
        """The principal for ``presented``, or raise."""
        return authenticate_with(presented, self._lookup)

    def check(self) -> None:
        """Raise ``ServiceUnavailable`` if the database cannot be read."""
        try:
            self._run("SELECT 1 FROM api_keys LIMIT 1").fetchall()
        except StateDatabaseUnavailable as exc:
            raise ServiceUnavailable("The key store cannot be read.") from exc

    def _lookup(self, key_id: str) -> tuple[bytes, Principal | None]:
        generation = self.watch.generation() if self.watch is not None else None
        fresh = generation is not None
        with self._lock:
            if generation != self._cached_generation or not fresh:
                self._cache.clear()
                self._cached_generation = generation
        cached = self._cache.get(key_id) if fresh else None
        if cached is not None:
            return cached
        try:
            row = self._run(
                "SELECT tenant, digest, revoked_at FROM api_keys WHERE key_id = %s", (key_id,)
            ).fetchone()
        except StateDatabaseUnavailable as exc:
            raise ServiceUnavailable(
                "The key store is unavailable; the request was not forwarded."
            ) from exc
        if row is None:
            return _DUMMY_DIGEST, None
        tenant, digest, revoked_at = row
        entry = (bytes(digest), None if revoked_at else Principal(tenant=tenant, key_id=key_id))
        if fresh:
            self._cache[key_id] = entry
        return entry

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """One statement on the store's connection, reconnecting once if it was lost."""
        return self._db.run(sql, params)
