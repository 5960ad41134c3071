"""Console logins: sessions held in this process, their CSRF tokens, login throttling.

A session id is 256 random bits, sent only in an HttpOnly, SameSite=Strict cookie; the
server keeps its SHA-256 digest, so a memory dump of the table does not hand out live
sessions. Every session has a CSRF token the client sends back in ``x-csrf-token`` on
each state change (the cookie alone is never enough to change anything). Sessions end
at their expiry, at logout, or when their user is disabled. These stores keep them in the
admin listener's process (a restart logs everybody out); with ``database_url`` they are in
PostgreSQL instead, shared by every replica (``sessions_postgres.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from localgate.admin.operators import Operator

__all__ = ["LoginThrottle", "Session", "SessionStore"]

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Session:
    """A logged-in user's session: a local user (checked again on each request, so
    disabling them ends it) or one the identity provider vouched for (``operator`` as it
    was at login, until the session expires)."""

    user: str
    csrf_token: str
    expires_at: float  # seconds since the epoch, by the store's clock
    operator: Operator
    local: bool

    def csrf_matches(self, presented: str | None) -> bool:
        """Whether ``presented`` is this session's CSRF token (constant time)."""
        return presented is not None and hmac.compare_digest(
            presented.encode(), self.csrf_token.encode()
        )


@dataclass(frozen=True, slots=True)
class NewSession:
    """A session just opened: its id goes into the cookie, once."""

    session_id: str
    session: Session


class SessionStore:
    """Open sessions, by the digest of their id."""

    def __init__(self, ttl_s: float, clock: Clock) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._sessions: dict[bytes, Session] = {}

    @property
    def ttl_s(self) -> float:
        """How long a session lasts."""
        return self._ttl_s

    def open(self, operator: Operator, *, local: bool = True) -> NewSession:
        """A new session for ``operator``: a local user, or (``local`` False) one the
        identity provider vouched for."""
        self._expire()
        session_id = secrets.token_urlsafe(32)
        session = Session(
            user=operator.name.removeprefix("user:"),
            csrf_token=secrets.token_urlsafe(32),
            expires_at=self._clock() + self._ttl_s,
            operator=operator,
            local=local,
        )
        self._sessions[_digest(session_id)] = session
        return NewSession(session_id, session)

    def get(self, session_id: str) -> Session | None:
        """The live session with this id; None if unknown or expired."""
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.expires_at <= self._clock():
            del self._sessions[key]
            return None
        return session

    def close(self, session_id: str) -> None:
        """End a session (logout)."""
        self._sessions.pop(_digest(session_id), None)

    def _expire(self) -> None:
        now = self._clock()
        for key in [key for key, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[key]


class LoginThrottle:
    """Failed logins per (user, address): after ``max_failures`` within ``window_s`` of the
    first, further attempts are refused until the window has passed. A success clears it."""

    def __init__(self, max_failures: int, window_s: float, clock: Clock) -> None:
        self._max = max_failures
        self._window_s = window_s
        self._clock = clock
        self._failures: dict[tuple[str, str], tuple[float, int]] = {}

    def retry_after(self, user: str, address: str) -> float | None:
        """Seconds until ``user`` may try again from ``address``; None: now."""
        entry = self._failures.get((user, address))
        if entry is None:
            return None
        first, count = entry
        remaining = first + self._window_s - self._clock()
        if remaining <= 0:
            del self._failures[(user, address)]
            return None
        return remaining if count >= self._max else None

    def failed(self, user: str, address: str) -> None:
        """Count a failed attempt."""
        if len(self._failures) > 100_000:
            self._forget_old()
        now = self._clock()
        first, count = self._failures.get((user, address), (now, 0))
        if first + self._window_s <= now:
            first, count = now, 0
        self._failures[(user, address)] = (first, count + 1)

    def succeeded(self, user: str, address: str) -> None:
        """Forget the failures of ``user`` from ``address``."""
        self._failures.pop((user, address), None)

    def _forget_old(self) -> None:
        now = self._clock()
        for key in [k for k, (first, _) in self._failures.items() if first + self._window_s <= now]:
            del self._failures[key]


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()
