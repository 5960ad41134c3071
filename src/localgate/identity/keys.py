"""Tenant API keys, stored only as hashes.

A key reads ``lg_<key_id>_<secret>``. The key id is public (it names the key in
logs, audit records and ``keys revoke``); the secret is 256 random bits, stored as
its SHA-256 digest — a slow password hash adds nothing for a secret of that entropy.
Lookups compare digests in constant time.

The gateway's worker processes and the ``localgate keys`` CLI are separate processes
sharing one SQLite file (``identity/postgres.py`` keeps keys in PostgreSQL instead, for
replicas). The gateway caches verified keys and drops the cache whenever SQLite's
``data_version`` says another connection committed, so a revocation takes effect on
the very next request without a database read per request. Asking ``data_version``
costs a read transaction (shared-memory locks, several system calls), so it is only
asked when the WAL-index header, which every commit rewrites, has changed.
"""

from __future__ import annotations

import hashlib
import hmac
import mmap
import re
import secrets
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from localgate.errors import PermissionDenied, ServiceUnavailable, Unauthenticated
from localgate.exchange.principal import Principal
from localgate.secret import Secret
from localgate.sqlitefile import use_wal

__all__ = [
    "LOCALGATE_KEY_PREFIX",
    "TENANT_FORMAT",
    "ApiKeyRecord",
    "IssuedKey",
    "KeyStore",
    "Principal",
    "SqliteKeyStore",
    "new_key",
]

LOCALGATE_KEY_PREFIX = "lg_"
_KEY_FORMAT = re.compile(r"^lg_(?P<key_id>[0-9a-f]{16})_(?P<secret>[A-Za-z0-9_-]{43})$")
TENANT_FORMAT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Compared against when the key id is unknown, so both paths do the same work.
_DUMMY_DIGEST = hashlib.sha256(b"localgate-unknown-key").digest()


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A newly created key; ``key`` is shown once and never stored."""

    tenant: str
    key_id: str
    key: Secret


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """A stored key as ``keys list`` shows it (no secret, no hash)."""

    key_id: str
    tenant: str
    label: str
    created_at: str
    revoked_at: str | None


class KeyStore(Protocol):
    """Resolves presented keys to principals."""

    def authenticate(self, presented: str | None) -> Principal:
        """The principal for ``presented``, or raise."""
        ...

    def check(self) -> None:
        """Raise if the store is not usable (for ``/readyz``)."""
        ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    key_id      TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    label       TEXT NOT NULL DEFAULT '',
    digest      BLOB NOT NULL,
    created_at  TEXT NOT NULL,
    revoked_at  TEXT
);
CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys (tenant);
"""


class SqliteKeyStore:
    """Keys in the gateway's SQLite state database."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # One connection, used from the event loop thread only; queries are point lookups.
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        # The timeout first: several worker processes open the file at once, and creating
        # the table waits for the others' locks instead of failing (WAL: use_wal retries).
        self._db.execute("PRAGMA busy_timeout=5000")
        use_wal(self._db)
        self._db.executescript(_SCHEMA)
        self._cache: dict[str, tuple[bytes, Principal | None]] = {}
        self._commits = _CommitWatch(path)
        self._commits.changed()
        self._seen_version = self._data_version()

    def close(self) -> None:
        """Close the database connection."""
        self._commits.close()
        self._db.close()

    # -- administration (CLI) -------------------------------------------------

    def create(self, tenant: str, label: str = "") -> IssuedKey:
        """Create a key for ``tenant``; the returned secret is not stored anywhere."""
        issued, digest = new_key(tenant)
        self._db.execute(
            "INSERT INTO api_keys (key_id, tenant, label, digest, created_at) VALUES (?,?,?,?,?)",
            (issued.key_id, tenant, label, digest, _now()),
        )
        return issued

    def list(self, tenant: str | None = None) -> list[ApiKeyRecord]:
        """All keys, optionally of one tenant, oldest first."""
        query = "SELECT key_id, tenant, label, created_at, revoked_at FROM api_keys"
        params: tuple[str, ...] = ()
        if tenant is not None:
            query += " WHERE tenant = ?"
            params = (tenant,)
        rows = self._db.execute(query + " ORDER BY rowid", params).fetchall()
        return [ApiKeyRecord(*row) for row in rows]

    def revoke(self, key_id: str) -> bool:
        """Revoke a key; False if no such key (revoking twice is not an error)."""
        cursor = self._db.execute(
            "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE key_id = ?",
            (_now(), key_id),
        )
        return cursor.rowcount > 0

    # -- request path ---------------------------------------------------------

    def authenticate(self, presented: str | None) -> Principal:
        """The principal for ``presented``, or raise."""
        return authenticate_with(presented, self._lookup)

    def check(self) -> None:
        """Raise ``ServiceUnavailable`` if the database cannot be read."""
        try:
            self._db.execute("SELECT 1 FROM api_keys LIMIT 1").fetchall()
        except sqlite3.Error as exc:
            raise ServiceUnavailable("The key store cannot be read.") from exc

    def _lookup(self, key_id: str) -> tuple[bytes, Principal | None]:
        try:
            if self._commits.changed():
                version = self._data_version()
                if version != self._seen_version:
                    self._cache.clear()
                    self._seen_version = version
            cached = self._cache.get(key_id)
            if cached is not None:
                return cached
            row = self._db.execute(
                "SELECT tenant, digest, revoked_at FROM api_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
        except sqlite3.Error as exc:
            raise ServiceUnavailable(
                "The key store is unavailable; the request was not forwarded."
            ) from exc
        if row is None:
            return _DUMMY_DIGEST, None
        tenant, digest, revoked_at = row
        entry = (bytes(digest), None if revoked_at else Principal(tenant=tenant, key_id=key_id))
        self._cache[key_id] = entry
        return entry

    def _data_version(self) -> int:
        row = self._db.execute("PRAGMA data_version").fetchone()
        return int(row[0])


class _CommitWatch:
    """Tells, reading 48 bytes of memory, whether another connection may have committed.

    In WAL mode every commit rewrites the WAL-index header at the start of the
    database's ``-shm`` file (SQLite's file format, "WAL-index format": a change
    counter, the last valid frame, salts, checksums). The header is read through a
    read-only memory map: no system call, so the event loop's thread keeps the GIL (a
    call that releases it lets a busy thread, such as the audit writer, hold it for up
    to the switch interval). SQLite only truncates that file when it is the sole
    connection, and the store's own connection stays open while the map exists. Any
    difference from the last look, or no ``-shm`` file at all, answers "maybe": the
    caller then asks ``PRAGMA data_version``, which stays the authority.
    """

    _HEADER_BYTES = 48

    def __init__(self, database: Path) -> None:
        self._path = database.with_name(database.name + "-shm")
        self._map: mmap.mmap | None = None
        self._last = b""

    def changed(self) -> bool:
        """False only if the header is what it was at the last call."""
        if self._map is None:
            try:
                with open(self._path, "rb") as file:
                    self._map = mmap.mmap(
                        file.fileno(), self._HEADER_BYTES, access=mmap.ACCESS_READ
                    )
            except (OSError, ValueError):  # no such file yet, or shorter than a header
                return True
        header = self._map[: self._HEADER_BYTES]
        if header == self._last:
            return False
        self._last = header
        return True

    def close(self) -> None:
        """Unmap the file (before the store's connection closes)."""
        if self._map is not None:
            self._map.close()
            self._map = None


def new_key(tenant: str) -> tuple[IssuedKey, bytes]:
    """A new key for ``tenant`` and the digest to store (the secret itself never is);
    ``ValueError`` for a tenant name that is not one."""
    if not TENANT_FORMAT.match(tenant):
        raise ValueError(
            "tenant must be 1-64 characters: letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    issued = IssuedKey(tenant=tenant, key_id=key_id, key=Secret(f"lg_{key_id}_{secret}"))
    return issued, _digest(secret)


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def authenticate_with(
    presented: str | None, lookup: Callable[[str], tuple[bytes, Principal | None]]
) -> Principal:
    """The principal of the key ``presented``, its stored digest and principal found by
    ``lookup`` (a key store's, whichever database it reads); raise ``Unauthenticated``
    for no key, a malformed or a wrong one, ``PermissionDenied`` for a revoked one."""
    if not presented:
        raise Unauthenticated(
            "No API key: send your localgate key in the x-goog-api-key header, "
            "the ?key= parameter or 'Authorization: Bearer'."
        )
    found = _KEY_FORMAT.match(presented)
    if found is None:
        raise Unauthenticated("API key not valid. Please pass a valid localgate API key.")
    key_id = found["key_id"]
    digest = _digest(found["secret"])
    stored_digest, principal = lookup(key_id)
    if not hmac.compare_digest(digest, stored_digest):
        raise Unauthenticated("API key not valid. Please pass a valid localgate API key.")
    if principal is None:
        raise PermissionDenied(f"The API key {key_id} has been revoked.")
    return principal
