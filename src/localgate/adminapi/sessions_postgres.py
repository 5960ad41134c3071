"""Console sessions and login throttling in the shared state database (``database_url``).

The same contracts as ``sessions.py``'s in-memory ones, with the rows in PostgreSQL: a
login made through one replica is honoured by every other (no sticky sessions needed), a
logout ends the session everywhere at once (sessions are read from the database on every
request, never cached), and failed logins are counted across replicas, so adding replicas
does not multiply an attacker's guesses, and an OIDC login started on one replica may come
back to another. The session id and the OIDC state are stored only as SHA-256 digests.
Expired rows are deleted as new ones are written.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from typing import Any

from localgate.admin.operators import Operator, Role
from localgate.adminapi.oidc import MAX_PENDING, PendingLogin
from localgate.adminapi.sessions import Clock, NewSession, Session, _digest
from localgate.errors import ServiceUnavailable
from localgate.state.postgres import StateConnection, StateDatabaseUnavailable

__all__ = ["PostgresLoginThrottle", "PostgresPendingLogins", "PostgresSessionStore"]


class _Shared:
    def __init__(self, db: StateConnection, what: str) -> None:
        self._db = db
        self._what = what

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        try:
            return self._db.run(sql, params)
        except StateDatabaseUnavailable as exc:
            raise ServiceUnavailable(f"The {self._what} cannot be read.") from exc


class PostgresSessionStore(_Shared):
    """Open sessions, by the digest of their id, shared by every replica."""

    def __init__(self, db: StateConnection, ttl_s: float, clock: Clock) -> None:
        super().__init__(db, "session store")
        self._ttl_s = ttl_s
        self._clock = clock

    @property
    def ttl_s(self) -> float:
        """How long a session lasts."""
        return self._ttl_s

    def open(self, operator: Operator, *, local: bool = True) -> NewSession:
        """A new session for ``operator`` (see ``SessionStore.open``)."""
        now = self._clock()
        self._run("DELETE FROM admin_sessions WHERE expires_at <= %s", (now,))
        session_id = secrets.token_urlsafe(32)
        session = Session(
            user=operator.name.removeprefix("user:"),
            csrf_token=secrets.token_urlsafe(32),
            expires_at=now + self._ttl_s,
            operator=operator,
            local=local,
        )
        self._run(
            "INSERT INTO admin_sessions (digest, user_name, operator, role, tenant, local, "
            "csrf_token, expires_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
            (
                _digest(session_id),
                session.user,
                operator.name,
                operator.role.value,
                operator.tenant,
                local,
                session.csrf_token,
                session.expires_at,
            ),
        )
        return NewSession(session_id, session)

    def get(self, session_id: str) -> Session | None:
        """The live session with this id; None if unknown or expired."""
        row = self._run(
            "SELECT user_name, operator, role, tenant, local, csrf_token, expires_at "
            "FROM admin_sessions WHERE digest = %s AND expires_at > %s",
            (_digest(session_id), self._clock()),
        ).fetchone()
        if row is None:
            return None
        user, name, role, tenant, local, csrf_token, expires_at = row
        return Session(
            user=user,
            csrf_token=csrf_token,
            expires_at=float(expires_at),
            operator=Operator(name, Role(role), tenant),
            local=bool(local),
        )

    def close(self, session_id: str) -> None:
        """End a session (logout), on every replica."""
        self._run("DELETE FROM admin_sessions WHERE digest = %s", (_digest(session_id),))


class PostgresLoginThrottle(_Shared):
    """Failed logins per (user, address), counted across replicas (see ``LoginThrottle``)."""

    def __init__(self, db: StateConnection, max_failures: int, window_s: float, clock: Clock):
        super().__init__(db, "login throttle")
        self._max = max_failures
        self._window_s = window_s
        self._clock = clock

    def retry_after(self, user: str, address: str) -> float | None:
        """Seconds until ``user`` may try again from ``address``; None: now."""
        row = self._run(
            "SELECT first_at, failures FROM admin_login_failures "
            "WHERE user_name = %s AND address = %s",
            (user, address),
        ).fetchone()
        if row is None:
            return None
        remaining = float(row[0]) + self._window_s - self._clock()
        if remaining <= 0:
            return None
        return remaining if int(row[1]) >= self._max else None

    def failed(self, user: str, address: str) -> None:
        """Count a failed attempt (one statement: replicas failing at once all count)."""
        now = self._clock()
        self._run("DELETE FROM admin_login_failures WHERE first_at <= %s", (now - self._window_s,))
        self._run(
            "INSERT INTO admin_login_failures AS f (user_name, address, first_at, failures) "
            "VALUES (%s, %s, %s, 1) ON CONFLICT (user_name, address) DO UPDATE SET "
            "failures = CASE WHEN f.first_at + %s <= excluded.first_at THEN 1 "
            "ELSE f.failures + 1 END, "
            "first_at = CASE WHEN f.first_at + %s <= excluded.first_at THEN excluded.first_at "
            "ELSE f.first_at END",
            (user, address, now, self._window_s, self._window_s),
        )

    def succeeded(self, user: str, address: str) -> None:
        """Forget the failures of ``user`` from ``address``."""
        self._run(
            "DELETE FROM admin_login_failures WHERE user_name = %s AND address = %s",
            (user, address),
        )


class PostgresPendingLogins(_Shared):
    """OIDC logins under way, shared by every replica (see ``oidc.PendingLogins``).

    Called from worker threads at once, so on a connection of its own, one statement at a
    time."""

    def __init__(self, db: StateConnection) -> None:
        super().__init__(db, "login store")
        self._lock = threading.Lock()

    def add(self, state: str, pending: PendingLogin, now: float) -> bool:
        """Keep ``pending`` under ``state``, forgetting expired ones; False if too many."""
        with self._lock:
            self._run("DELETE FROM admin_oidc_pending WHERE expires_at <= %s", (now,))
            [count] = self._run("SELECT count(*) FROM admin_oidc_pending").fetchone()
            if int(count) >= MAX_PENDING:
                return False
            self._run(
                "INSERT INTO admin_oidc_pending (state_digest, verifier, nonce, expires_at) "
                "VALUES (%s, %s, %s, %s)",
                (_state_digest(state), pending.verifier, pending.nonce, pending.expires_at),
            )
            return True

    def take(self, state: str) -> PendingLogin | None:
        """The login under ``state``, removed in the same statement: used once, whichever
        replica the browser comes back to."""
        with self._lock:
            row = self._run(
                "DELETE FROM admin_oidc_pending WHERE state_digest = %s "
                "RETURNING verifier, nonce, expires_at",
                (_state_digest(state),),
            ).fetchone()
        return PendingLogin(row[0], row[1], float(row[2])) if row else None


def _state_digest(state: str) -> bytes:
    return hashlib.sha256(b"oidc-state:" + state.encode()).digest()
