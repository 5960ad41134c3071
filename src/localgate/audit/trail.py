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

from localgate.audit.checkpoint import CheckpointSigner, load_signer, write_key_file
from localgate.audit.checkpointing import Checkpointer
from localgate.audit.crypto import CipherSuite, MasterKey, load_or_create_master_key
from localgate.audit.database import Database, PostgresDatabase, sqlite_at
from localgate.audit.readiness import AuditReadiness
from localgate.audit.retention import purge_expired, shred_expired
from localgate.audit.spool import Spool
from localgate.audit.stage import TrailAudit
from localgate.audit.store import AuditStore
from localgate.config import ENV_AUDIT_MASTER_KEY, AuditSettings, Settings
from localgate.observability.metrics import GatewayMetrics

__all__ = ["AuditTrail", "database", "master_key", "signer"]

logger = logging.getLogger("localgate.audit")
_SHRED_INTERVAL_S = 3600.0


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


def signer(settings: Settings, *, create: bool) -> CheckpointSigner | None:
    """The checkpoint signer, if its key file is readable (created in the data dir if allowed)."""
    path = settings.audit_signing_key_path
    if not path.exists():
        if not create or settings.audit.signing_key_file is not None:
            return None
        write_key_file(path, CheckpointSigner.generate(settings.audit.log_name))
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
    _task: asyncio.Task[None] | None = None
    _shredder: asyncio.Task[None] | None = None

    @classmethod
    def open(cls, settings: Settings, metrics: GatewayMetrics | None = None) -> AuditTrail:
        """Open the store (creating keys on first use, in the data directory)."""
        master = master_key(settings, create=True)
        store = AuditStore(
            database(settings),
            master,
            CipherSuite(settings.audit.suite),
            key_period=settings.audit.key_period,
            synchronous=settings.audit.synchronous.upper(),
        )
        spool = Spool(_spool_path(settings), master)
        stage = TrailAudit(
            store, spool, store_original=settings.audit.store_original_prompt, metrics=metrics
        )
        checkpointer = None
        key = None
        if settings.audit.sign_checkpoints:
            key = signer(settings, create=True)
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
        return cls(
            store,
            stage,
            checkpointer,
            settings.audit.checkpoint_interval_s,
            settings.audit,
            key,
            AuditReadiness(store, stage),
            metrics,
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
        try:
            self.checkpointer.run()
        except Exception:
            logger.exception("audit: signing checkpoints failed")
            return
        if self.metrics is not None:
            self.metrics.audit_checkpoint_success.set(time.time())


def _spool_path(settings: Settings) -> Path:
    return settings.audit_db_path.with_name(settings.audit_db_path.name + ".spool")
