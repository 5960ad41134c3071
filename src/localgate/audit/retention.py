"""Retention: crypto-shredding of payloads, and purging of old metadata with signed markers.

Payloads: data keys of expired periods are destroyed.

Payload keys live ``audit.payload_retention_days`` past their period, original-prompt
keys ``audit.original_prompt_retention_hours``; then their wrapped copies are erased
from audit_keys. The ciphertexts stay where they are and keep verifying (hashes cover
them), but nobody can read them again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from localgate.audit.checkpoint import CheckpointSigner, CheckpointVerifier, note_text
from localgate.audit.records import PendingRecord, parse_header
from localgate.audit.store import AuditReader, AuditStore
from localgate.config import AuditSettings

__all__ = ["purge_expired", "purge_point", "shred_expired"]

PURGE_HEADER = "localgate audit purge"


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


def purge_expired(
    store: AuditStore,
    reader: AuditReader,
    settings: AuditSettings,
    signer: CheckpointSigner,
    now: datetime,
) -> list[tuple[str, int]]:
    """Erase metadata older than the retention period; returns (tenant, purged_below)."""
    cutoff = now - timedelta(days=settings.metadata_retention_days)
    cutoff_text = cutoff.isoformat(timespec="seconds")
    done = []
    for tenant in reader.tenants():
        row = reader.db.execute(
            "SELECT MAX(seq) FROM audit_log WHERE tenant=? AND recorded_at < ? AND kind <> 'purge'",
            (tenant, cutoff_text),
        ).fetchone()
        if row is None or row[0] is None:
            continue
        below = int(row[0]) + 1
        if purge_point(reader, tenant, None) >= below:
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
        done.append((tenant, below))
    return done


def purge_point(reader: AuditReader, tenant: str, verifier: CheckpointVerifier | None) -> int:
    """Below which position the tenant's records may legitimately be erased.

    Only markers whose note verifies count (any marker when ``verifier`` is None, which
    the purge job itself uses to find where it stopped last time).
    """
    point = 0
    rows = reader.db.execute(
        "SELECT CAST(header AS BLOB) FROM audit_log WHERE tenant=? AND kind='purge'", (tenant,)
    ).fetchall()
    for (raw,) in rows:
        try:
            fields = parse_header(raw)
            note = str(fields["note"])
            text = verifier.open_note(note) if verifier else note_text(note)
            lines = dict(line.split(" ", 1) for line in text.splitlines()[1:] if " " in line)
            if not text.startswith(PURGE_HEADER) or lines.get("tenant") != tenant:
                continue
            point = max(point, int(lines["purged_below"]))
        except (KeyError, TypeError, ValueError):
            continue
    return point
