"""Assembling the audit trail from the configuration: keys, store, spool, stage, signer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from localgate.audit.checkpoint import (
    CheckpointError,
    CheckpointSigner,
    load_signer,
)
from localgate.audit.checkpointing import Checkpointer
from localgate.audit.crypto import CipherSuite, MasterKey, load_or_create_master_key
from localgate.audit.database import Database, DatabaseUnavailable, PostgresDatabase, sqlite_at
from localgate.audit.election import FileElection, PostgresElection, SignerElection
from localgate.audit.keyring import Keyring
from localgate.audit.migrate import head_revision, upgrade_schema
from localgate.audit.readiness import AuditReadiness
from localgate.audit.retention import purge_expired, shred_expired
from localgate.audit.spool import Spool
from localgate.audit.stage import TrailAudit
from localgate.audit.store import AuditStore
from localgate.config import ENV_AUDIT_MASTER_KEY, AuditSettings, Settings
from localgate.observability.metrics import GatewayMetrics
from localgate.secret import create_key_file

__all__ = [
    "AuditStartupError",
    "AuditTrail",
    "database",
    "key_problems",
    "master_key",
    "schema_version",
    "signer",
    "startup_problems",
]

logger = logging.getLogger("localgate.audit")
_SHRED_INTERVAL_S = 3600.0


class AuditStartupError(Exception):
    """The audit trail cannot start with what this gateway was given; each problem is one
    line naming the setting to fix."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def database(settings: Settings) -> Callable[[], Database]:
    """Opens connections to the configured audit database."""
    if settings.audit.store == "postgres" and settings.audit.postgres_dsn:
        dsn = settings.audit.postgres_dsn
        return lambda: PostgresDatabase(dsn)
    return sqlite_at(settings.audit_db_path)


def master_key(settings: Settings, *, create: bool) -> MasterKey:
    """The master key: $LOCALGATE_AUDIT_MASTER_KEY, else the key file (created if allowed)."""
    return load_or_create_master_key(
        os.environ.get(ENV_AUDIT_MASTER_KEY), settings.audit_master_key_path, create=create
    )


def creates_keys(settings: Settings) -> bool:
    """Whether a missing key may be created at start: only beside an embedded (SQLite)
    store. Replicas sharing a PostgreSQL store must share keys, so a replica that made its
    own would write what the others cannot read and sign what they cannot verify."""
    return settings.audit.store == "sqlite" and not settings.shared_state


# The fingerprints of the keys in use, remembered in audit_meta by the first gateway.
MASTER_FINGERPRINT = "master_key_id"
SIGNING_FINGERPRINT = "signing_key"


def key_problems(
    db: Database,
    master: MasterKey,
    signing: CheckpointSigner | None,
    suite: CipherSuite,
    *,
    remember: bool = True,
) -> list[str]:
    """Whether the keys this gateway holds are the store's: the fingerprints the store
    remembers (the first gateway to start records them, unless ``remember`` is false), and
    the master key must open the stored data keys.

    A store from before fingerprints were remembered adopts the signing key only if it
    signed one of the stored checkpoints (whatever else someone inserted there).
    """
    problems = []
    remembered = _remembered(db, MASTER_FINGERPRINT, master.key_id, remember=remember)
    if remembered not in (None, master.key_id):
        problems.append(
            f"audit.master_key_file / {ENV_AUDIT_MASTER_KEY}: this gateway's master key (id "
            f"{master.key_id}) is not the audit store's (id {remembered}); every replica on "
            "one store needs the same master key"
        )
    else:
        unwrap = Keyring(db, master, suite).unwrap_problem()
        if unwrap is not None:
            problems.append(
                f"audit.master_key_file / {ENV_AUDIT_MASTER_KEY}: {unwrap} (every replica on "
                "one audit store needs the same master key)"
            )
    if signing is not None:
        held = signing.verifier_key()
        stored = _stored_fingerprint(db, SIGNING_FINGERPRINT)
        if stored is None and not _signed_a_stored_checkpoint(db, signing):
            stored = "another key"
        elif stored is None and remember:
            stored = _remembered(db, SIGNING_FINGERPRINT, held, remember=True)
        if stored not in (None, held):
            problems.append(
                f"audit.signing_key_file: this gateway's signing key ({held}) is not the one "
                f"that signs the audit store's checkpoints ({stored}); start it with that key, "
                "or with audit.checkpoint_signer: never if another replica signs"
            )
    return problems


def _stored_fingerprint(db: Database, name: str) -> str | None:
    row = db.execute("SELECT value FROM audit_meta WHERE name=?", (name,)).fetchone()
    return str(row[0]) if row else None


def _remembered(db: Database, name: str, held: str, *, remember: bool) -> str | None:
    """The fingerprint the store remembers for ``name``, recording ``held`` if none."""
    if remember:
        db.execute(
            "INSERT INTO audit_meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
            (name, held),
        )
    return _stored_fingerprint(db, name)


def _signed_a_stored_checkpoint(db: Database, signing: CheckpointSigner) -> bool:
    """True if no checkpoint is stored, or ``signing`` signed one of them."""
    verifier = signing.verifier()
    rows = db.execute("SELECT note FROM audit_checkpoints").fetchall()
    for (note,) in rows:
        try:
            verifier.verify(str(note))
        except CheckpointError:
            continue
        return True
    return not rows


def remember_master_key(db: Database, master: MasterKey) -> None:
    """After a rotation: the store's master key is now ``master``."""
    db.execute(
        "INSERT INTO audit_meta (name, value) VALUES (?, ?) "
        "ON CONFLICT (name) DO UPDATE SET value=excluded.value",
        (MASTER_FINGERPRINT, master.key_id),
    )


def startup_problems(settings: Settings, *, inspect_only: bool = False) -> list[str]:
    """What keeps the audit trail from starting, one line each (empty: it can start).

    Checked by ``localgate serve`` before it starts the server, so that a replica given
    the wrong key, or none, says so in one line instead of a traceback. With
    ``inspect_only`` (``localgate doctor``) nothing is created or migrated: keys missing
    beside a SQLite store are fine (the gateway makes them), and the key check needs a
    store that is already at the current schema.
    """
    if not settings.proxy.enable_audit:
        return []
    create = creates_keys(settings) and not inspect_only
    try:
        master = master_key(settings, create=create)
    except FileNotFoundError:
        return [] if creates_keys(settings) else [_missing_master_key(settings)]
    except (OSError, ValueError) as exc:
        return [f"audit.master_key_file / {ENV_AUDIT_MASTER_KEY}: {exc}"]
    signing: CheckpointSigner | None = None
    if settings.audit.signer_mode != "never":
        signing = signer(settings, create=create)
        if signing is None and not creates_keys(settings):
            return [_missing_signing_key(settings)]
    try:
        db = database(settings)()
    except DatabaseUnavailable as exc:
        return [f"audit.store ({settings.audit.store}): {exc}"]
    try:
        if not inspect_only:
            upgrade_schema(db.sqlalchemy_url)
        elif schema_version(db) != head_revision():
            return []  # nothing to compare keys with before the gateway has migrated it
        return key_problems(
            db, master, signing, CipherSuite(settings.audit.suite), remember=not inspect_only
        )
    finally:
        db.close()


def schema_version(db: Database) -> str | None:
    """The audit schema's Alembic revision (None: never migrated)."""
    try:
        row = db.execute("SELECT version_num FROM alembic_version").fetchone()
    except Exception:  # no such table: the drivers raise their own errors  # noqa: BLE001
        if db.in_transaction:
            db.rollback()
        return None
    return str(row[0]) if row else None


def _missing_master_key(settings: Settings) -> str:
    return (
        f"audit.master_key_file: no audit master key at {settings.audit_master_key_path} (nor "
        f"in {ENV_AUDIT_MASTER_KEY}); with {_shared(settings)} it is never created at start: "
        "make one with `localgate audit keygen --out DIR` and give every replica the same file"
    )


def _shared(settings: Settings) -> str:
    return "database_url" if settings.shared_state else "audit.store: postgres"


def _missing_signing_key(settings: Settings) -> str:
    return (
        f"audit.signing_key_file: no checkpoint signing key at {settings.audit_signing_key_path}; "
        f"with {_shared(settings)} it is never created at start: give the replicas that may "
        "sign the signing.key from `localgate audit keygen --out DIR`, and set "
        "audit.checkpoint_signer: never on the others"
    )


def signer(settings: Settings, *, create: bool) -> CheckpointSigner | None:
    """The checkpoint signer, if its key file is readable (created in the data dir if allowed)."""
    path = settings.audit_signing_key_path
    if not path.exists():
        if not create or settings.audit.signing_key_file is not None:
            return None
        # Several worker processes may start at once: one key wins, all load it.
        created = CheckpointSigner.generate(settings.audit.log_name)
        create_key_file(path, created.key_string().reveal() + "\n")
    try:
        return load_signer(path)
    except PermissionError:
        return None


@dataclass
class AuditTrail:
    """The running audit trail of a gateway."""

    store: AuditStore
    stage: TrailAudit
    checkpointer: Checkpointer | None
    interval_s: float
    retention: AuditSettings
    signer: CheckpointSigner | None = None
    readiness: AuditReadiness | None = None
    metrics: GatewayMetrics | None = None
    # With audit.checkpoint_signer: auto, signs only while elected.
    election: SignerElection | None = None
    _task: asyncio.Task[None] | None = None
    _shredder: asyncio.Task[None] | None = None

    @classmethod
    def open(cls, settings: Settings, metrics: GatewayMetrics | None = None) -> AuditTrail:
        """Open the store (creating keys on first use in the data directory, beside an
        embedded store only); ``AuditStartupError`` if the keys are missing or not the
        store's."""
        try:
            master = master_key(settings, create=creates_keys(settings))
        except FileNotFoundError as exc:
            raise AuditStartupError([_missing_master_key(settings)]) from exc
        store = AuditStore(
            database(settings),
            master,
            CipherSuite(settings.audit.suite),
            key_period=settings.audit.key_period,
            synchronous=settings.audit.synchronous.upper(),
            commit_delay_s=settings.audit.commit_delay_ms / 1000,
        )
        spool = Spool(_spool_path(settings), master)
        stage = TrailAudit(
            store, spool, store_original=settings.audit.store_original_prompt, metrics=metrics
        )
        checkpointer = None
        key = None
        election: SignerElection | None = None
        if settings.audit.signer_mode != "never":
            key = signer(settings, create=creates_keys(settings))
            if key is None and not creates_keys(settings):
                store.close()
                raise AuditStartupError([_missing_signing_key(settings)])
            if key is None:
                logger.warning(
                    "audit: no readable signing key at %s; run 'localgate audit checkpoint' "
                    "where the key is",
                    settings.audit_signing_key_path,
                )
            else:
                checkpointer = Checkpointer(
                    store.reader(),
                    store.hasher,
                    key,
                    settings.audit.log_name,
                    settings.audit.checkpoint_export_dir,
                )
                if settings.audit.signer_mode == "auto":
                    election = _election(settings)
        reader = store.reader()
        try:
            problems = key_problems(reader.db, master, key, store.suite)
        finally:
            reader.close()
        if problems:
            store.close()
            raise AuditStartupError(problems)
        return cls(
            store,
            stage,
            checkpointer,
            settings.audit.checkpoint_interval_s,
            settings.audit,
            key,
            AuditReadiness(store, stage),
            metrics,
            election,
        )

    async def start(self) -> None:
        """Start writing, retrying spooled records and signing checkpoints."""
        self.store.start()
        await self.stage.start()
        if self.checkpointer is not None:
            if self.metrics is not None:
                # Counted from the start: a gateway that can never sign is noticed too.
                self.metrics.audit_checkpoint_success.set(time.time())
            self._task = asyncio.create_task(self._sign_forever())
        self._shredder = asyncio.create_task(self._shred_forever())

    async def close(self) -> None:
        """Sign a last checkpoint, then stop."""
        for task in (self._task, self._shredder):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.stage.close()
        self.store.close()
        if self.checkpointer is not None:
            self._sign()
        if self.election is not None:
            self.election.close()

    async def _sign_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await asyncio.to_thread(self._sign)

    async def _shred_forever(self) -> None:
        while True:
            await asyncio.to_thread(self._shred)
            await asyncio.sleep(_SHRED_INTERVAL_S)

    def _shred(self) -> None:
        reader = self.store.reader()
        try:
            now = datetime.now(UTC)
            destroyed = shred_expired(reader, self.retention, now)
            if destroyed:
                self.store.forget_keys()
                logger.info("audit: destroyed %d expired data keys", len(destroyed))
            if self.signer is not None:
                for tenant, below in purge_expired(
                    self.store, reader, self.retention, self.signer, now
                ):
                    logger.info("audit: purged metadata of %s below record %d", tenant, below)
        except Exception:
            logger.exception("audit: destroying expired data keys failed")
        finally:
            reader.close()

    def _sign(self) -> None:
        if self.checkpointer is None:
            return
        if self.election is not None and not self.election.lead():
            if self.metrics is not None:
                self.metrics.audit_checkpoint_success.set(0)  # a standby: another signs
            return
        try:
            self.checkpointer.run()
        except Exception:
            logger.exception("audit: signing checkpoints failed")
            return
        if self.metrics is not None:
            self.metrics.audit_checkpoint_success.set(time.time())


def _election(settings: Settings) -> SignerElection:
    """The signer election of ``audit.checkpoint_signer: auto``: beside the store."""
    if settings.audit.store == "postgres" and settings.audit.postgres_dsn:
        dsn = settings.audit.postgres_dsn
        return PostgresElection(lambda: PostgresDatabase(dsn), settings.audit.log_name)
    path = settings.audit_db_path
    return FileElection(path.with_name(path.name + ".signer.lock"))


def _spool_path(settings: Settings) -> Path:
    return settings.audit_db_path.with_name(settings.audit_db_path.name + ".spool")
