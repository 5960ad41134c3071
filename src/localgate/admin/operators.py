"""The admin API's operators: API tokens and local users, each with a role.

Tokens read ``lga_<token_id>_<secret>``; like tenant keys (``identity/keys.py``) the
secret is 256 random bits stored as its SHA-256 digest and compared in constant time.
Users' passwords are low-entropy, so they are stored as argon2id hashes. Both live beside
the tenant keys: in the gateway's SQLite state database, or with ``database_url`` in
PostgreSQL, shared by every replica (``operators_postgres.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from localgate.admin.closing import ClosingService
from localgate.errors import InvalidArgument, NotFound, ServiceUnavailable, Unauthenticated
from localgate.identity.keys import TENANT_FORMAT
from localgate.secret import Secret

__all__ = [
    "IssuedToken",
    "Operator",
    "OperatorAdmin",
    "OperatorStore",
    "Role",
    "TokenRecord",
    "UserRecord",
    "parse_duration",
]

TOKEN_PREFIX = "lga_"  # noqa: S105 - the public prefix of every token, not a secret
_TOKEN_FORMAT = re.compile(r"^lga_(?P<token_id>[0-9a-f]{16})_(?P<secret>[A-Za-z0-9_-]{43})$")
_USER_FORMAT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
_DUMMY_DIGEST = hashlib.sha256(b"localgate-unknown-token").digest()
_MIN_PASSWORD = 12


class Role(StrEnum):
    """What an operator may do (docs/admin-api.md has the table)."""

    ADMIN = "admin"
    SECURITY = "security"
    AUDITOR = "auditor"
    TENANT_ADMIN = "tenant-admin"
    VIEWER = "viewer"


@dataclass(frozen=True, slots=True)
class Operator:
    """Who is calling the admin API: a token or a user, its role, and for a tenant-admin
    the one tenant it may see."""

    name: str  # "token:<id>" or "user:<name>"
    role: Role
    tenant: str | None


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A new token; ``token`` is shown once and never stored."""

    token_id: str
    role: Role
    tenant: str | None
    expires_at: str | None
    token: Secret


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A stored token as listed (no secret, no digest)."""

    token_id: str
    role: str
    tenant: str | None
    label: str
    created_at: str
    expires_at: str | None
    revoked_at: str | None


@dataclass(frozen=True, slots=True)
class UserRecord:
    """A local user as listed (no password hash)."""

    name: str
    role: str
    tenant: str | None
    created_at: str
    disabled_at: str | None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS admin_tokens (
    token_id    TEXT PRIMARY KEY,
    role        TEXT NOT NULL,
    tenant      TEXT,
    label       TEXT NOT NULL DEFAULT '',
    digest      BLOB NOT NULL,
    created_at  TEXT NOT NULL,
    expires_at  TEXT,
    revoked_at  TEXT
);
CREATE TABLE IF NOT EXISTS admin_users (
    name          TEXT PRIMARY KEY,
    role          TEXT NOT NULL,
    tenant        TEXT,
    password_hash TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    disabled_at   TEXT
);
"""


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``45m`` or ``90s`` as a duration; ``InvalidArgument`` otherwise."""
    found = re.fullmatch(r"\s*(\d{1,6})\s*([dhms])\s*", text)
    if found is None or int(found[1]) == 0:
        raise InvalidArgument(f"not a duration: {text!r} (use e.g. 30d, 12h, 45m)")
    unit = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}[found[2]]
    return timedelta(**{unit: int(found[1])})


class OperatorStore(ClosingService):
    """Creates, lists, revokes and authenticates the admin API's tokens and users.

    The rules live here; where the rows live is a subclass's: ``OperatorAdmin`` (the SQLite
    state database) or ``PostgresOperatorStore`` (``database_url``, shared by replicas).
    """

    def __init__(self, *, now: Callable[[], datetime] | None = None) -> None:
        self._now = now or (lambda: datetime.now(UTC))
        # argon2id with the library's defaults (RFC 9106's second recommended profile).
        self._hasher = PasswordHasher()
        self._dummy_hash = self._hasher.hash(secrets.token_urlsafe(16))

    # -- where the rows live (each subclass) --------------------------------------------

    def _insert_token(self, row: _TokenRow) -> None:
        raise NotImplementedError

    def _token_rows(self) -> list[TokenRecord]:
        raise NotImplementedError

    def _revoke(self, token_id: str, at: str) -> bool:
        raise NotImplementedError

    def _token(self, token_id: str) -> _StoredToken | None:
        """The token's role, tenant, digest, expiry and revocation; ``ServiceUnavailable``
        if the store cannot be read."""
        raise NotImplementedError

    def _insert_user(self, record: UserRecord, password_hash: str) -> bool:
        """False if the name is taken."""
        raise NotImplementedError

    def _user_rows(self) -> list[UserRecord]:
        raise NotImplementedError

    def _disable(self, name: str, at: str) -> bool:
        raise NotImplementedError

    def _enabled_user(self, name: str) -> _StoredUser | None:
        """An enabled user's role, tenant and password hash."""
        raise NotImplementedError

    # -- tokens -------------------------------------------------------------------------

    def create_token(
        self,
        role: Role,
        tenant: str | None = None,
        expires_in: timedelta | None = None,
        label: str = "",
    ) -> IssuedToken:
        """A new token; a tenant-admin's must name its tenant, no other role's may."""
        _check_scope(role, tenant)
        token_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        now = self._now()
        expires = _iso(now + expires_in) if expires_in is not None else None
        self._insert_token(
            _TokenRow(token_id, role.value, tenant, label, _digest(secret), _iso(now), expires)
        )
        return IssuedToken(
            token_id, role, tenant, expires, Secret(f"{TOKEN_PREFIX}{token_id}_{secret}")
        )

    def list_tokens(self) -> list[TokenRecord]:
        """Every token, oldest first."""
        return self._token_rows()

    def revoke_token(self, token_id: str) -> None:
        """Revoke a token (again is not an error); ``NotFound`` if there is none."""
        if not self._revoke(token_id, _iso(self._now())):
            raise NotFound(f"no admin token with id {token_id}")

    def authenticate_token(self, presented: str) -> Operator:
        """The operator a bearer token stands for; ``Unauthenticated`` for any token that
        is malformed, unknown, revoked or expired (one message: nothing to probe with)."""
        refused = Unauthenticated("The admin token is not valid.")
        found = _TOKEN_FORMAT.match(presented)
        if found is None:
            raise refused
        row = self._token(found["token_id"])
        stored = row.digest if row else _DUMMY_DIGEST
        if not hmac.compare_digest(_digest(found["secret"]), stored) or row is None:
            raise refused
        if row.revoked_at is not None or (row.expires_at and row.expires_at <= _iso(self._now())):
            raise refused
        return Operator(f"token:{found['token_id']}", Role(row.role), row.tenant)

    # -- users --------------------------------------------------------------------------

    def create_user(
        self, name: str, role: Role, password: Secret, tenant: str | None = None
    ) -> UserRecord:
        """A new local user (``InvalidArgument`` if the name is taken or the password is
        shorter than 12 characters)."""
        if not _USER_FORMAT.match(name):
            raise InvalidArgument(
                "a user name is 1-64 letters, digits, '.', '_', '@' or '-', starting with a "
                "letter or digit"
            )
        _check_scope(role, tenant)
        if len(password.reveal()) < _MIN_PASSWORD:
            raise InvalidArgument(f"the password must be at least {_MIN_PASSWORD} characters")
        record = UserRecord(name, role.value, tenant, _iso(self._now()), None)
        if not self._insert_user(record, self._hasher.hash(password.reveal())):
            raise InvalidArgument(f"a user named {name!r} exists")
        return record

    def list_users(self) -> list[UserRecord]:
        """Every user, by name."""
        return self._user_rows()

    def disable_user(self, name: str) -> None:
        """Disable a user (their sessions end at their next request); ``NotFound``."""
        if not self._disable(name, _iso(self._now())):
            raise NotFound(f"no admin user {name!r}")

    def user(self, name: str) -> Operator | None:
        """The operator an enabled user stands for; None if unknown or disabled."""
        row = self._enabled_user(name)
        return Operator(f"user:{name}", Role(row.role), row.tenant) if row else None

    def check_password(self, name: str, password: str) -> Operator | None:
        """The user, if ``password`` is theirs and they are enabled; a hash is checked even
        for an unknown name, so the answer's timing does not tell which names exist."""
        row = self._enabled_user(name)
        try:
            self._hasher.verify(row.password_hash if row else self._dummy_hash, password)
        except (VerificationError, InvalidHashError):
            return None
        return Operator(f"user:{name}", Role(row.role), row.tenant) if row else None


@dataclass(frozen=True, slots=True)
class _TokenRow:
    token_id: str
    role: str
    tenant: str | None
    label: str
    digest: bytes
    created_at: str
    expires_at: str | None


@dataclass(frozen=True, slots=True)
class _StoredToken:
    role: str
    tenant: str | None
    digest: bytes
    expires_at: str | None
    revoked_at: str | None


@dataclass(frozen=True, slots=True)
class _StoredUser:
    role: str
    tenant: str | None
    password_hash: str


class OperatorAdmin(OperatorStore):
    """The operators in the gateway's SQLite state database (no ``database_url``)."""

    def __init__(self, path: Path, *, now: Callable[[], datetime] | None = None) -> None:
        super().__init__(now=now)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def _insert_token(self, row: _TokenRow) -> None:
        self._db.execute(
            "INSERT INTO admin_tokens (token_id, role, tenant, label, digest, created_at, "
            "expires_at) VALUES (?,?,?,?,?,?,?)",
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
        rows = self._db.execute(
            "SELECT token_id, role, tenant, label, created_at, expires_at, revoked_at "
            "FROM admin_tokens ORDER BY rowid"
        ).fetchall()
        return [TokenRecord(*row) for row in rows]

    def _revoke(self, token_id: str, at: str) -> bool:
        cursor = self._db.execute(
            "UPDATE admin_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE token_id = ?",
            (at, token_id),
        )
        return cursor.rowcount > 0

    def _token(self, token_id: str) -> _StoredToken | None:
        try:
            row = self._db.execute(
                "SELECT role, tenant, digest, expires_at, revoked_at FROM admin_tokens "
                "WHERE token_id = ?",
                (token_id,),
            ).fetchone()
        except sqlite3.Error as exc:
            raise ServiceUnavailable("The admin token store cannot be read.") from exc
        if row is None:
            return None
        return _StoredToken(row[0], row[1], bytes(row[2]), row[3], row[4])

    def _insert_user(self, record: UserRecord, password_hash: str) -> bool:
        try:
            self._db.execute(
                "INSERT INTO admin_users (name, role, tenant, password_hash, created_at) "
                "VALUES (?,?,?,?,?)",
                (record.name, record.role, record.tenant, password_hash, record.created_at),
            )
        except sqlite3.IntegrityError:
            return False
        return True

    def _user_rows(self) -> list[UserRecord]:
        rows = self._db.execute(
            "SELECT name, role, tenant, created_at, disabled_at FROM admin_users ORDER BY name"
        ).fetchall()
        return [UserRecord(*row) for row in rows]

    def _disable(self, name: str, at: str) -> bool:
        cursor = self._db.execute(
            "UPDATE admin_users SET disabled_at = COALESCE(disabled_at, ?) WHERE name = ?",
            (at, name),
        )
        return cursor.rowcount > 0

    def _enabled_user(self, name: str) -> _StoredUser | None:
        row = self._db.execute(
            "SELECT role, tenant, password_hash FROM admin_users "
            "WHERE name = ? AND disabled_at IS NULL",
            (name,),
        ).fetchone()
        return _StoredUser(*row) if row else None


def _check_scope(role: Role, tenant: str | None) -> None:
    if role is Role.TENANT_ADMIN:
        if tenant is None or not TENANT_FORMAT.match(tenant):
            raise InvalidArgument("a tenant-admin needs --tenant: the one tenant it manages")
    elif tenant is not None:
        raise InvalidArgument(f"only a tenant-admin is scoped to a tenant, not {role.value}")


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds")
