"""The admin API's operators in the shared state database (PostgreSQL, ``database_url``).

Every replica's admin listener reads the same tokens and users. What it looked up is
cached in memory and dropped whenever the ``admin_operators`` change counter moves (a
trigger bumps it with any change to ``admin_tokens`` or ``admin_users``, made by a replica,
the CLI or by hand): a token revoked or a user disabled on one replica is refused by every
other within one second. While the counter cannot be read the cache is not trusted and each
lookup reads the database, which answers or fails the request with 503 (fail closed).
Misses are never cached, so unknown ids cannot grow the cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from localgate.admin.operators import (
    OperatorStore,
    TokenRecord,
    UserRecord,
    _StoredToken,
    _StoredUser,
    _TokenRow,
)
from localgate.errors import ServiceUnavailable
from localgate.state.generations import GenerationWatch
from localgate.state.migrate import prepare_schema
from localgate.state.postgres import StateConnection, StateDatabaseUnavailable

__all__ = ["GENERATION", "PostgresOperatorStore"]

GENERATION = "admin_operators"

Row = TypeVar("Row", _StoredToken, _StoredUser)


class PostgresOperatorStore(OperatorStore):
    """Tokens and users in PostgreSQL, shared by every replica."""

    def __init__(
        self,
        dsn: str,
        *,
        poll: bool = True,
        migrate: bool = True,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__(now=now)
        # Connected first: an unreachable database is reported as such, not as a failed
        # migration. Used by one thread at a time (the admin API's store thread, the CLI).
        self._db = StateConnection(dsn)
        try:
            if migrate:
                prepare_schema(dsn)
            self._watch = GenerationWatch(dsn, GENERATION, what="admin operators") if poll else None
        except StateDatabaseUnavailable:
            self._db.close()
            raise
        self._lock = threading.Lock()
        self._tokens: dict[str, _StoredToken] = {}
        self._users: dict[str, _StoredUser] = {}
        self._cached_generation: int | None = None

    def close(self) -> None:
        """Stop polling and close the connection."""
        if self._watch is not None:
            self._watch.close()
        self._db.close()

    # -- writes and listings: always the database -------------------------------------

    def _insert_token(self, row: _TokenRow) -> None:
        self._run(
            "INSERT INTO admin_tokens (token_id, role, tenant, label, digest, created_at, "
            "expires_at) VALUES (%s,%s,%s,%s,%s,%s,%s)",
            (
                row.token_id,
                row.role,
                row.tenant,
                row.label,
                row.digest,
                row.created_at,
                row.expires_at,
            ),
        )

    def _token_rows(self) -> list[TokenRecord]:
        rows = self._run(
            "SELECT token_id, role, tenant, label, created_at, expires_at, revoked_at "
            "FROM admin_tokens ORDER BY position"
        ).fetchall()
        return [TokenRecord(*row) for row in rows]

    def _revoke(self, token_id: str, at: str) -> bool:
        cursor = self._run(
            "UPDATE admin_tokens SET revoked_at = COALESCE(revoked_at, %s) WHERE token_id = %s",
            (at, token_id),
        )
        return int(cursor.rowcount) > 0

    def _insert_user(self, record: UserRecord, password_hash: str) -> bool:
        cursor = self._run(
            "INSERT INTO admin_users (name, role, tenant, password_hash, created_at) "
            "VALUES (%s,%s,%s,%s,%s) ON CONFLICT (name) DO NOTHING",
            (record.name, record.role, record.tenant, password_hash, record.created_at),
        )
        return int(cursor.rowcount) > 0

    def _user_rows(self) -> list[UserRecord]:
        rows = self._run(
            "SELECT name, role, tenant, created_at, disabled_at FROM admin_users ORDER BY name"
        ).fetchall()
        return [UserRecord(*row) for row in rows]

    def _disable(self, name: str, at: str) -> bool:
        cursor = self._run(
            "UPDATE admin_users SET disabled_at = COALESCE(disabled_at, %s) WHERE name = %s",
            (at, name),
        )
        return int(cursor.rowcount) > 0

    # -- the request path: cached while the counter says nothing changed --------------

    def _token(self, token_id: str) -> _StoredToken | None:
        def read() -> _StoredToken | None:
            row = self._run(
                "SELECT role, tenant, digest, expires_at, revoked_at FROM admin_tokens "
                "WHERE token_id = %s",
                (token_id,),
            ).fetchone()
            return _StoredToken(row[0], row[1], bytes(row[2]), row[3], row[4]) if row else None

        return self._cached(self._tokens, token_id, read, "The admin token store")

    def _enabled_user(self, name: str) -> _StoredUser | None:
        def read() -> _StoredUser | None:
            row = self._run(
                "SELECT role, tenant, password_hash FROM admin_users "
                "WHERE name = %s AND disabled_at IS NULL",
                (name,),
            ).fetchone()
            return _StoredUser(row[0], row[1], row[2]) if row else None

        return self._cached(self._users, name, read, "The admin user store")

    def _cached(
        self, cache: dict[str, Row], key: str, read: Callable[[], Row | None], what: str
    ) -> Row | None:
        generation = self._watch.generation() if self._watch is not None else None
        with self._lock:
            if generation is None or generation != self._cached_generation:
                self._tokens.clear()
                self._users.clear()
                self._cached_generation = generation
            if generation is not None and key in cache:
                return cache[key]
        try:
            found = read()
        except StateDatabaseUnavailable as exc:
            raise ServiceUnavailable(f"{what} cannot be read.") from exc
        if found is not None and generation is not None:
            with self._lock:
                # Only if no change was seen meanwhile: a row read before a revocation must
                # not be kept under the counter that came after it.
                if self._cached_generation == generation:
                    cache[key] = found
        return found

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self._db.run(sql, params)
