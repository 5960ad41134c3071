"""Finding audit records by their metadata: tenant, time, request, trace, outcome, model.

Reads headers only; nothing is decrypted here (``AuditAdmin.records`` does that). The
indexed columns narrow the scan (tenant, kind, request id, recorded time); the header's
own fields decide the rest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from localgate.audit.records import parse_header
from localgate.audit.store import AuditReader
from localgate.audit.trail import database
from localgate.config import Settings
from localgate.errors import NotFound

__all__ = [
    "AuditQuery",
    "AuditSearch",
    "FoundRecord",
    "ModelUsage",
    "SignedCheckpoint",
    "Usage",
    "open_reader",
]

_COLUMNS = "tenant, seq, kind, request_id, CAST(header AS BLOB)"


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """What to look for; None matches anything. ``after`` continues a previous page:
    the (tenant, seq) of its last record."""

    tenant: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    request_id: str | None = None
    trace_id: str | None = None
    outcome: str | None = None
    model: str | None = None
    kind: str | None = None
    after: tuple[str, int] | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class FoundRecord:
    """A record's place and header (empty once its metadata was purged)."""

    tenant: str
    seq: int
    kind: str
    request_id: str
    header: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SignedCheckpoint:
    """A signed head of a tenant's log: its size then, and the signed note."""

    tenant: str
    size: int
    note: str


@dataclass(slots=True)
class ModelUsage:
    """One model's requests and tokens (as the upstream counted them)."""

    requests: int = 0
    prompt_tokens: int = 0
    candidates_tokens: int = 0
    total_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Usage:
    """A tenant's completed requests in a time range: by outcome, and by model."""

    tenant: str
    requests: int
    outcomes: dict[str, int]
    models: dict[str, ModelUsage]


class AuditSearch:
    """Searches the configured audit trail (each call opens and closes its own reader)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def search(self, query: AuditQuery) -> list[FoundRecord]:
        """Up to ``query.limit`` records matching it, by tenant then sequence."""
        where: list[str] = []
        params: list[str | int] = []
        for column, value in (
            ("tenant", query.tenant),
            ("request_id", query.request_id),
            ("kind", query.kind),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if query.since is not None:
            where.append("recorded_at >= ?")
            params.append(_stamp(query.since))
        if query.until is not None:
            where.append("recorded_at < ?")
            params.append(_stamp(query.until))
        if query.after is not None:
            where.append("(tenant > ? OR (tenant = ? AND seq > ?))")
            params += [query.after[0], query.after[0], query.after[1]]
        sql = f"SELECT {_COLUMNS} FROM audit_log"  # noqa: S608 - fixed columns; values bound
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY tenant, seq"
        found: list[FoundRecord] = []
        reader = self._reader()
        try:
            for tenant, seq, kind, request_id, raw in reader.db.execute(sql, params):
                header = _header(raw)
                if not _matches(header, query):
                    continue
                found.append(FoundRecord(tenant, int(seq), kind, request_id, header))
                if len(found) >= query.limit:
                    break
        finally:
            reader.close()
        return found

    def usage(
        self, tenant: str, since: datetime | None = None, until: datetime | None = None
    ) -> Usage:
        """``tenant``'s completed requests (their completion records) between the times;
        read from the headers only."""
        where, params = ["tenant = ?", "kind = 'answer'"], [tenant]
        if since is not None:
            where.append("recorded_at >= ?")
            params.append(_stamp(since))
        if until is not None:
            where.append("recorded_at < ?")
            params.append(_stamp(until))
        # Fixed conditions; every value is bound.
        sql = "SELECT CAST(header AS BLOB) FROM audit_log WHERE " + " AND ".join(where)  # noqa: S608
        outcomes: dict[str, int] = {}
        models: dict[str, ModelUsage] = {}
        count = 0
        reader = self._reader()
        try:
            for (raw,) in reader.db.execute(sql, params):
                header = _header(raw)
                if not header:
                    continue  # purged metadata: nothing to count
                count += 1
                outcome = str(header.get("outcome", "unknown"))
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                model = models.setdefault(str(header.get("model") or "unknown"), ModelUsage())
                model.requests += 1
                tokens = header.get("usage") or {}
                model.prompt_tokens += int(tokens.get("prompt") or 0)
                model.candidates_tokens += int(tokens.get("candidates") or 0)
                model.total_tokens += int(tokens.get("total") or 0)
        finally:
            reader.close()
        return Usage(tenant, count, outcomes, models)

    def checkpoints(self, tenant: str | None = None) -> list[SignedCheckpoint]:
        """The signed checkpoints of ``tenant`` (of every tenant if None), smallest first."""
        reader = self._reader()
        try:
            tenants = [tenant] if tenant is not None else sorted(reader.known_tenants())
            return [
                SignedCheckpoint(name, size, note)
                for name in tenants
                for size, note in reader.checkpoints(name)
            ]
        finally:
            reader.close()

    def signed_sizes(self, tenants: Iterable[str]) -> dict[str, int]:
        """Per tenant, how many of its records a stored checkpoint covers (its largest size)."""
        reader = self._reader()
        try:
            return {name: reader.signed_size(name) for name in set(tenants)}
        finally:
            reader.close()

    def _reader(self) -> AuditReader:
        return open_reader(self._settings)


def open_reader(settings: Settings) -> AuditReader:
    """A reader of the configured audit store; NotFound if its SQLite file does not exist
    (a reader would create an empty one)."""
    if settings.audit.store == "sqlite" and not settings.audit_db_path.exists():
        raise NotFound(f"no audit log at {settings.audit_db_path}")
    return AuditReader(database(settings)())


def _stamp(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _header(raw: bytes | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        return parse_header(raw)
    except ValueError:
        return {}  # a damaged header is for `audit verify` to report, not to crash a search


def _matches(header: dict[str, Any], query: AuditQuery) -> bool:
    return all(
        wanted is None or header.get(field) == wanted
        for field, wanted in (
            ("trace_id", query.trace_id),
            ("outcome", query.outcome),
            ("model", query.model),
        )
    )
