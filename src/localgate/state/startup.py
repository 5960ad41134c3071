"""What keeps a replica from starting on the shared state database, one line each.

Checked by ``localgate serve`` before the server starts (``database_url`` set): the
database answers with these credentials, its schema is brought up to date, and the key
that seals thought signatures is the one every other replica holds: a signature sealed by
one replica must open on any other the load balancer picks next.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from localgate.config import ENV_SIGNATURE_KEY, Settings
from localgate.secret import load_key
from localgate.state.fingerprints import KeyMismatch, remember_fingerprint
from localgate.state.migrate import VERSION_TABLE, upgrade_schema
from localgate.state.postgres import StateDatabaseUnavailable, connect, describe

__all__ = [
    "SEAL_FINGERPRINT",
    "schema_version",
    "seal_fingerprint",
    "seal_problems",
    "startup_problems",
]

SEAL_FINGERPRINT = "signature_seal_key"


def seal_fingerprint(key: bytes) -> str:
    """A name for the seal key that does not reveal it."""
    return hashlib.sha256(b"localgate-seal:" + key).hexdigest()[:16]


def startup_problems(settings: Settings) -> list[str]:
    """Problems with the shared state (empty without ``database_url``, or when all is well).

    Brings the schema up to date and records the seal key's fingerprint if none is yet.
    """
    if settings.database_url is None:
        return []
    seal, problems = _seal_key(settings)
    try:
        db = connect(settings.database_url)
    except StateDatabaseUnavailable as exc:
        return [*problems, str(exc)]
    try:
        try:
            upgrade_schema(settings.database_url)
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy wraps the driver's errors
            return [*problems, f"database_url: cannot migrate the schema: {_first(exc)}"]
        if seal is not None:
            problems += _seal_mismatch(db, seal, remember=True)
    finally:
        db.close()
    return problems


def seal_problems(settings: Settings, db: Any) -> list[str]:
    """For ``localgate doctor``: the seal key is there and is the one the database remembers
    (nothing is recorded)."""
    seal, problems = _seal_key(settings)
    if seal is not None and schema_version(db) is not None:
        problems += _seal_mismatch(db, seal, remember=False)
    return problems


def schema_version(db: Any) -> str | None:
    """The state schema's Alembic revision (None: never migrated)."""
    row = db.execute("SELECT to_regclass(%s)", (VERSION_TABLE,)).fetchone()
    if row is None or row[0] is None:
        return None
    found = db.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()  # noqa: S608 - a constant
    return str(found[0]) if found else None


def _seal_key(settings: Settings) -> tuple[bytes | None, list[str]]:
    try:
        return load_key(os.environ.get(ENV_SIGNATURE_KEY), settings.signature_key_path), []
    except FileNotFoundError:
        return None, [
            f"{_WHERE}: no thought-signature seal key at {settings.signature_key_path} (nor in "
            f"{ENV_SIGNATURE_KEY}); with database_url it is never created at start: every "
            "replica needs the same one (`localgate audit keygen --out DIR` writes seal.key)"
        ]
    except (OSError, ValueError) as exc:
        return None, [f"{_WHERE}: {exc}"]


def _seal_mismatch(db: Any, seal: bytes, *, remember: bool) -> list[str]:
    held = seal_fingerprint(seal)
    if remember:
        try:
            remember_fingerprint(db, SEAL_FINGERPRINT, held)
        except KeyMismatch as exc:
            return [_mismatch(exc.held, exc.remembered)]
        return []
    row = db.execute(
        "SELECT fingerprint FROM shared_key_fingerprints WHERE name = %s", (SEAL_FINGERPRINT,)
    ).fetchone()
    return [_mismatch(held, str(row[0]))] if row and row[0] != held else []


def _mismatch(held: str, remembered: str) -> str:
    return (
        f"{_WHERE}: this gateway's thought-signature seal key (fingerprint {held}) is not "
        f"the one the replicas on this database use ({remembered}); give every replica the "
        "same key"
    )


_WHERE = f"proxy.signature_key_file / {ENV_SIGNATURE_KEY}"


def _first(exc: BaseException) -> str:
    return describe(exc.__cause__ or exc)
