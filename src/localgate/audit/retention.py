"""Retention: crypto-shredding of payloads, and purging of old metadata with signed markers.

Metadata: records older than ``audit.metadata_retention_days`` lose their header and
ciphertexts, below a signed purge marker; what is old is decided from signed checkpoint
times and verified header times, never from an unverified column.

Payloads: data keys of expired periods are destroyed.

Payload keys live ``audit.payload_retention_days`` past their period, original-prompt
keys ``audit.original_prompt_retention_hours``; then their wrapped copies are erased
from audit_keys. The ciphertexts stay where they are and keep verifying (hashes cover
them), but nobody can read them again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from localgate.audit.anchor import Anchor, read_anchor
from localgate.audit.checkpoint import CheckpointError, CheckpointSigner, CheckpointVerifier
from localgate.audit.records import PURGE_HEADER, PendingRecord
from localgate.audit.store import AuditReader, AuditStore
from localgate.audit.verify import purge_point, verify_tenant
from localgate.config import AuditSettings

__all__ = ["PurgeOutcome", "purge_expired", "purge_point", "purge_tenants", "shred_expired"]

logger = logging.getLogger("localgate.audit")


def _period_end(period: str) -> datetime | None:
    for fmt, step in (("%Y-%m-%dT%H", "hour"), ("%Y-%m-%d", "day"), ("%Y-%m", "month")):
        try:
            start = datetime.strptime(period, fmt)
        except ValueError:
            continue
        if step == "hour":
            return start + timedelta(hours=1)
        if step == "day":
            return start + timedelta(days=1)
        return (start.replace(day=28) + timedelta(days=4)).replace(day=1)
    return None


def shred_expired(reader: AuditReader, settings: AuditSettings, now: datetime) -> list[str]:
    """Destroy every data key whose retention has ended; returns their key ids."""
    limits = {
        "payload": timedelta(days=settings.payload_retention_days),
        "prompt": timedelta(hours=settings.original_prompt_retention_hours),
    }
    naive_now = now.replace(tzinfo=None)
    destroyed = []
    if reader.db.dialect == "sqlite":
        # This connection overwrites what it erases (the wrapped keys), instead of leaving
        # it in free pages; the writer's connection need not pay for that.
        reader.db.execute("PRAGMA secure_delete=ON")
    rows = reader.db.execute(
        "SELECT key_id, purpose, period FROM audit_keys WHERE wrapped IS NOT NULL"
    ).fetchall()
    for key_id, purpose, period in rows:
        limit = limits.get(purpose)
        end = _period_end(period)
        if limit is None or end is None or end + limit > naive_now:
            continue
        reader.db.execute(
            "UPDATE audit_keys SET wrapped = NULL, destroyed_at = ? WHERE key_id = ?",
            (now.isoformat(timespec="seconds"), key_id),
        )
        destroyed.append(key_id)
    if destroyed and reader.db.dialect == "sqlite":
        # The wrapped keys must not survive in the WAL or in free pages either.
        reader.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return destroyed


@dataclass(frozen=True, slots=True)
class PurgeOutcome:
    """What the purge did for one tenant: erased below ``below``, or refused and why."""

    tenant: str
    below: int = 0
    refused: str | None = None


def purge_expired(
    store: AuditStore,
    reader: AuditReader,
    settings: AuditSettings,
    signer: CheckpointSigner,
    now: datetime,
) -> list[tuple[str, int]]:
    """Erase metadata older than the retention period; returns (tenant, purged_below).

    A tenant whose log does not verify is left alone and logged as an error; see
    ``purge_tenants`` for the reasons.
    """
    done = []
    for outcome in purge_tenants(store, reader, settings, signer, now):
        if outcome.refused is None:
            done.append((outcome.tenant, outcome.below))
        else:
            logger.error("audit: %s not purged: %s", outcome.tenant, outcome.refused)
    return done


def purge_tenants(
    store: AuditStore,
    reader: AuditReader,
    settings: AuditSettings,
    signer: CheckpointSigner,
    now: datetime,
) -> list[PurgeOutcome]:
    """Erase metadata older than the retention period, deciding from verified times only.

    A record is erased only when (1) a checkpoint signed before the cutoff covers it, so
    the signature vouches that it existed then, and (2) it and every record before it
    carry a header time before the cutoff, in a log that verified completely (records,
    tree, head, anchor) just before: a database administrator who back-dates a record or
    its ``recorded_at`` column gets a refusal, not an erasure. Tenants with nothing old
    enough are skipped without reading their log (decided from signed checkpoints).
    """
    cutoff = now - timedelta(days=settings.metadata_retention_days)
    cutoff_text = cutoff.isoformat(timespec="seconds")
    verifier = signer.verifier()
    anchor: Anchor | None = None
    anchor_read = False
    anchor_refusal: str | None = None
    outcomes = []
    for tenant in reader.tenants():
        point = purge_point(reader, tenant, verifier)
        if _signed_before(reader, tenant, verifier, cutoff) <= point:
            continue  # no checkpoint old enough vouches for anything not yet purged
        if not anchor_read and settings.checkpoint_export_dir is not None:
            anchor_read = True  # once, and only when some tenant is due
            try:
                anchor = read_anchor(settings.checkpoint_export_dir, verifier, settings.log_name)
            except FileNotFoundError as exc:
                anchor_refusal = f"{exc}; nothing is purged without it"
            else:
                if anchor.bad:
                    name, reason = anchor.bad[0]
                    anchor_refusal = f"the anchor's {name} does not verify ({reason})"
        if anchor_refusal is not None:
            outcomes.append(PurgeOutcome(tenant, refused=anchor_refusal))
            continue
        report = verify_tenant(reader, tenant, store.suite, verifier, anchor, cutoff=cutoff)
        if not report.ok:
            outcomes.append(
                PurgeOutcome(
                    tenant,
                    refused=f"its log does not verify ({report.problem}); "
                    "run `localgate audit verify`",
                )
            )
            continue
        covered = max((c.size for c in report.signed if c.time < cutoff), default=0)
        below = min(covered, report.young_from)
        if below <= point:
            continue
        note = signer.sign_note(
            f"{PURGE_HEADER}\ntenant {tenant}\npurged_below {below}\n"
            f"cutoff {cutoff_text}\ntime {now.isoformat(timespec='seconds')}\n"
        )
        marker = PendingRecord(
            tenant, "purge", f"purge-{tenant}-{below}", {"purged_below": below, "note": note}
        )
        # The marker is durable in the log before anything is erased.
        store.submit(marker).result(timeout=60)
        reader.db.begin()
        if reader.db.dialect == "postgres":
            reader.db.execute("SET LOCAL localgate.audit_purge = 'on'")
        reader.db.execute(
            "UPDATE audit_log SET header = NULL, payload = NULL, original = NULL "
            "WHERE tenant = ? AND seq < ? AND kind <> 'purge'",
            (tenant, below),
        )
        reader.db.commit()
        outcomes.append(PurgeOutcome(tenant, below))
    return outcomes


def _signed_before(
    reader: AuditReader, tenant: str, verifier: CheckpointVerifier, cutoff: datetime
) -> int:
    """The largest size among the tenant's checkpoints that our key signed before ``cutoff``."""
    covered = 0
    for _, note in reader.checkpoints(tenant):
        try:
            checkpoint = verifier.verify(note)
        except CheckpointError:
            continue  # verification, if it gets that far, reports it
        if checkpoint.time < cutoff:
            covered = max(covered, checkpoint.size)
    return covered
