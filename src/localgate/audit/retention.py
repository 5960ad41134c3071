"""Retention by crypto-shredding: data keys of expired periods are destroyed.

Payload keys live ``audit.payload_retention_days`` past their period, original-prompt
keys ``audit.original_prompt_retention_hours``; then their wrapped copies are erased
from audit_keys. The ciphertexts stay where they are and keep verifying (hashes cover
them), but nobody can read them again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from localgate.audit.store import AuditReader
from localgate.config import AuditSettings

__all__ = ["shred_expired"]


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
