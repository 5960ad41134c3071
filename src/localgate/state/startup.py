"""What keeps a replica from starting on the shared state database, one line each.

Checked by ``localgate serve`` before the server starts (``database_url`` set): the
database answers with these credentials, its schema is brought up to date, and the key
that seals thought signatures is the one every other replica holds: a signature sealed by
one replica must open on any other the load balancer picks next.
"""

from __future__ import annotations

import hashlib
import os

from localgate.config import ENV_SIGNATURE_KEY, Settings
from localgate.secret import load_key
from localgate.state.fingerprints import KeyMismatch, remember_fingerprint
from localgate.state.migrate import upgrade_schema
from localgate.state.postgres import StateDatabaseUnavailable, connect, describe

__all__ = ["SEAL_FINGERPRINT", "seal_fingerprint", "startup_problems"]

SEAL_FINGERPRINT = "signature_seal_key"


def seal_fingerprint(key: bytes) -> str:
    """A name for the seal key that does not reveal it."""
    return hashlib.sha256(b"localgate-seal:" + key).hexdigest()[:16]


def startup_problems(settings: Settings) -> list[str]:
    """Problems with the shared state (empty without ``database_url``, or when all is well)."""
    if settings.database_url is None:
        return []
    problems: list[str] = []
    seal: bytes | None = None
    where = f"proxy.signature_key_file / {ENV_SIGNATURE_KEY}"
    try:
        seal = load_key(os.environ.get(ENV_SIGNATURE_KEY), settings.signature_key_path)
    except FileNotFoundError:
        problems.append(
            f"{where}: no thought-signature seal key at {settings.signature_key_path} (nor in "
            f"{ENV_SIGNATURE_KEY}); with database_url it is never created at start: every "
            "replica needs the same one (`localgate audit keygen --out DIR` writes seal.key)"
        )
    except (OSError, ValueError) as exc:
        problems.append(f"{where}: {exc}")
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
            try:
                remember_fingerprint(db, SEAL_FINGERPRINT, seal_fingerprint(seal))
            except KeyMismatch as exc:
                problems.append(
                    f"{where}: this gateway's thought-signature seal key (fingerprint "
                    f"{exc.held}) is not the one the replicas on this database use "
                    f"({exc.remembered}); give every replica the same key"
                )
    finally:
        db.close()
    return problems


def _first(exc: BaseException) -> str:
    return describe(exc.__cause__ or exc)
