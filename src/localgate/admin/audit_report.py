"""The figures of the auditor's report: one tenant, one period, read from the audit trail.

Everything here is counted from what the trail holds (record headers, checkpoints, purge
markers, the key table) and the verification of the tenant's log; nothing depends on the
time it is computed, so the same period and the same log give the same figures. Nothing
personal is read: payloads stay encrypted, and of a header only counts, ids, hashes and
the enumerated fields (outcome, model, route, upstream, redaction counts) are used.

Access to the tenant's payloads is read from the admin-action trail (the log ``_admin``):
every decryption through the admin API or the CLI is appended there, with who and why,
before it happens. That log is verified too, and the report says whether it held.

``docs/audit.md`` ("The auditor's report") says what each figure means; rendering is in
``admin/audit_report_html.py``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from localgate.admin.audit import AuditAdmin, AuditVerification
from localgate.audit.checkpoint import CheckpointError, CheckpointVerifier
from localgate.audit.records import ADMIN_LOG, PURGE_HEADER
from localgate.audit.verify import TenantReport
from localgate.errors import NotFound

__all__ = [
    "CheckpointRow",
    "ConfigSeen",
    "KeyRow",
    "PayloadAccess",
    "PurgeMarker",
    "RefusedRequest",
    "ReportFigures",
    "RequestFacts",
    "collect",
    "period_bounds",
]

# Outcomes of requests that were refused or blocked (nothing, or not all, left).
REFUSALS = frozenset(
    {
        "blocked by policy",
        "refused: redaction failed",
        "refused: retrieval",
        "withheld: audit trail unavailable",
    }
)
NO_COMPLETION = "no completion record"
# Actions of the admin-action trail that read payloads: a request's decrypted records
# (admin API, `audit show --decrypt`), whole logs decrypted (`audit export --decrypt`), and
# prompts compared by HMAC (`audit find-prompt`: whether a text was sent).
PAYLOAD_ACTIONS = frozenset({"audit.decrypt", "audit.export", "audit.find-prompt"})
# The first version whose admin API and CLI put every payload read on record.
ACCESS_RECORDED_SINCE = "0.1.0"
# Redaction actions after which the value did not leave in clear.
REPLACING_ACTIONS = frozenset({"pseudonymize", "mask", "block"})


def period_bounds(start: str, end: str) -> tuple[datetime, datetime]:
    """[start, end) in UTC from the command's ``--from`` and ``--to``.

    A date names the whole day: ``--to 2026-12-31`` includes the 31st. A time is taken
    as given (UTC when it names no offset), and ``--to`` is then exclusive.
    """

    def parse(text: str, *, end_of_day: bool) -> datetime:
        try:
            day = date.fromisoformat(text)
        except ValueError:
            moment = datetime.fromisoformat(text)
            return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
        moment = datetime(day.year, day.month, day.day, tzinfo=UTC)
        return moment + timedelta(days=1) if end_of_day else moment

    first, last = parse(start, end_of_day=False), parse(end, end_of_day=True)
    if last <= first:
        raise ValueError(f"the period is empty: --to {end} is not after --from {start}")
    return first, last


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """One request of the period, as its records describe it (no personal fields)."""

    request_id: str
    time: str  # of its first record (header time, verified by the leaf)
    outcome: str
    status: int | None
    model: str
    route: str
    upstream: str
    dialect: str
    served_from: str | None  # "cache: exact", "local: local-embedder", None: upstream
    config: str | None
    left: bool  # the request record names a digest of what was sent upstream
    redaction: dict[str, dict[str, int]]  # type -> action -> count
    payload_key: str | None


@dataclass(frozen=True, slots=True)
class RefusedRequest:
    """A blocked or refused request: id, time, outcome, status and the finding types."""

    request_id: str
    time: str
    outcome: str
    status: int | None
    types: str


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    """A signed checkpoint of the tenant's log that bears on the period."""

    size: int
    root: str  # hex
    time: str
    covers_period_end: bool


@dataclass(frozen=True, slots=True)
class KeyRow:
    """A data key of the tenant whose period overlaps the report's."""

    key_id: str
    purpose: str
    period: str
    destroyed_at: str | None


@dataclass(frozen=True, slots=True)
class PurgeMarker:
    """A signed purge marker in the tenant's log."""

    seq: int
    purged_below: int
    cutoff: str
    time: str
    signature: str  # "valid", "INVALID: why", or "not checked (no verifier key)"
    note: str


@dataclass(frozen=True, slots=True)
class PayloadAccess:
    """A read of the tenant's payloads, as the admin-action trail recorded it (before it
    happened): ids, names and the stated reason, never a payload."""

    seq: int  # in the _admin log
    time: str
    actor: str
    role: str
    action: str
    target: str  # the request id read, or the tenants whose logs were exported
    reason: str
    outcome: str  # "attempted" (then performed unless it failed) or "failed: STATUS"
    call_id: str  # the admin call's request id: an attempt and its failure share it


@dataclass(frozen=True, slots=True)
class ConfigSeen:
    """A configuration hash the period's records ran under."""

    config: str
    first: str
    last: str
    requests: int


@dataclass(slots=True)
class ReportFigures:
    """Everything the report shows; equal for the same period and the same log."""

    tenant: str
    start: datetime
    end: datetime
    log_name: str
    suite: str
    verifier_key: str | None
    verifier_fingerprint: str | None
    verification: TenantReport | None
    anchor: str  # what the anchor said
    anchor_ok: bool
    checkpoints: list[CheckpointRow]
    requests: list[RequestFacts]
    purged_in_period: int  # records whose metadata was erased, by their recorded_at column
    keys: list[KeyRow]
    markers: list[PurgeMarker]
    retention: dict[str, int]
    by_day: dict[str, Counter[str]] = field(default_factory=dict)
    access: list[PayloadAccess] = field(default_factory=list)
    admin_trail: TenantReport | None = None  # the _admin log's verification

    @property
    def admin_trail_verified(self) -> bool:
        """The admin-action trail, which the access section is read from, verified."""
        return self.admin_trail is not None and self.admin_trail.ok

    def access_by_actor(self) -> list[tuple[str, str, int, int]]:
        """(actor, role, payload reads recorded, of which failed), most reads first."""
        reads: Counter[tuple[str, str]] = Counter()
        failed: Counter[tuple[str, str]] = Counter()
        for access in self.access:
            who = (access.actor, access.role)
            if access.outcome == "attempted":
                reads[who] += 1
            else:
                failed[who] += 1
        return sorted(
            (
                (actor, role, number, failed[(actor, role)])
                for (actor, role), number in reads.items()
            ),
            key=lambda row: (-row[2], row[0], row[1]),
        )

    @property
    def verified(self) -> bool:
        """The tenant's log and the anchor verified."""
        return self.verification is not None and self.verification.ok and self.anchor_ok

    def count(self, attribute: str) -> list[tuple[str, int]]:
        """Requests by one attribute, most first, then by name."""
        counts = Counter(str(getattr(request, attribute)) for request in self.requests)
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))

    def redaction(self) -> list[tuple[str, str, int]]:
        """(type, action, findings) over the period's requests."""
        total: Counter[tuple[str, str]] = Counter()
        for request in self.requests:
            for kind, actions in request.redaction.items():
                for action, number in actions.items():
                    total[(kind, action)] += number
        return sorted(
            ((kind, action, number) for (kind, action), number in total.items()),
            key=lambda item: (item[0], item[1]),
        )

    def refused(self) -> list[RefusedRequest]:
        """The blocked and refused requests, in time order."""
        return [
            RefusedRequest(
                request.request_id,
                request.time,
                request.outcome,
                request.status,
                ", ".join(sorted(request.redaction)) or "-",
            )
            for request in self.requests
            if request.outcome in REFUSALS
        ]

    def configs(self) -> list[ConfigSeen]:
        """Each configuration hash seen, in the order it was first seen."""
        seen: dict[str, list[Any]] = {}
        for request in self.requests:
            name = request.config or "(not recorded)"
            entry = seen.setdefault(name, [request.time, request.time, 0])
            entry[1] = request.time
            entry[2] += 1
        return [
            ConfigSeen(name, first, last, number) for name, (first, last, number) in seen.items()
        ]

    def transfers(self) -> list[tuple[str, int, int, int]]:
        """Per finding type: (type, findings in requests that left, of which sent in
        clear (action allow), findings in requests that never left)."""
        rows: dict[str, list[int]] = {}
        for request in self.requests:
            for kind, actions in request.redaction.items():
                row = rows.setdefault(kind, [0, 0, 0])
                number = sum(actions.values())
                if request.left:
                    row[0] += number
                    row[1] += actions.get("allow", 0)
                else:
                    row[2] += number
        return [(kind, *rows[kind]) for kind in sorted(rows)]  # type: ignore[misc]

    def upstream_requests(self) -> int:
        """Requests whose redacted content left for an upstream."""
        return sum(1 for request in self.requests if request.left)


def collect(
    admin: AuditAdmin,
    tenant: str,
    start: datetime,
    end: datetime,
    *,
    verifier_key: str | None = None,
    checkpoint_dir: Any = None,
) -> ReportFigures:
    """Verify the tenant's log and count its records of [start, end)."""
    verification = admin.verify(tenant, checkpoint_dir, verifier_key)
    admin_verification = admin.verify(ADMIN_LOG, checkpoint_dir, verifier_key)
    verifier = admin.verifier(verifier_key)
    report = next((r for r in verification.reports if r.tenant == tenant), None)
    if report is not None and report.ok and report.records == 0 and tenant not in admin.tenants():
        # Neither the store nor a signed tenant list or the anchor knows it: a typing
        # mistake, not an empty log (a deleted tenant fails verification instead).
        known = ", ".join(sorted(admin.tenants())) or "none"
        raise NotFound(f"the audit trail knows no tenant {tenant!r} (tenants: {known})")
    records = list(admin.export(tenant))
    first_of: dict[str, dict[str, Any]] = {}
    request_of: dict[str, dict[str, Any]] = {}
    answer_of: dict[str, dict[str, Any]] = {}
    markers: list[PurgeMarker] = []
    for record in records:
        header = record.header
        if not header:
            continue  # purged: counted below, from the recorded_at column
        kind = header.get("kind")
        if kind == "purge":
            markers.append(_marker(record.seq, header, verifier))
            continue
        request_id = str(header.get("request_id"))
        first_of.setdefault(request_id, header)
        (request_of if kind == "request" else answer_of).setdefault(request_id, header)
    purged = sum(1 for time in admin.purged_times(tenant) if _in_period(time, start, end))
    requests = []
    for request_id, first in first_of.items():
        if not _in_period(str(first.get("time", "")), start, end):
            continue
        requests.append(
            _facts(request_id, first, request_of.get(request_id), answer_of.get(request_id))
        )
    requests.sort(key=lambda request: (request.time, request.request_id))
    by_day: dict[str, Counter[str]] = {}
    for request in requests:
        by_day.setdefault(request.time[:10], Counter())[request.outcome] += 1
    keys = [
        KeyRow(key_id, purpose, period, destroyed_at)
        for key_id, purpose, period, destroyed_at in admin.data_keys(tenant)
        if purpose != "hmac" and _overlaps(period, start, end)
    ]
    used = {request.payload_key for request in requests if request.payload_key}
    destroyed = {key.key_id for key in keys if key.destroyed_at}
    retention = {
        "payload_keys": sum(1 for key in keys if key.purpose == "payload"),
        "payload_keys_destroyed": sum(
            1 for key in keys if key.purpose == "payload" and key.destroyed_at
        ),
        "prompt_keys": sum(1 for key in keys if key.purpose == "prompt"),
        "prompt_keys_destroyed": sum(
            1 for key in keys if key.purpose == "prompt" and key.destroyed_at
        ),
        "requests_unreadable": sum(1 for request in requests if request.payload_key in destroyed),
        "requests_readable": sum(
            1
            for request in requests
            if request.payload_key in used and request.payload_key not in destroyed
        ),
        "metadata_purged": purged,
    }
    return ReportFigures(
        tenant=tenant,
        start=start,
        end=end,
        log_name=admin.log_name,
        suite=admin.suite(),
        verifier_key=verifier.key_string() if verifier else None,
        verifier_fingerprint=(
            hashlib.sha256(verifier.key_string().encode()).hexdigest() if verifier else None
        ),
        verification=report,
        anchor=_anchor_text(verification),
        anchor_ok=verification.anchor_missing is None and not verification.anchor_problems,
        checkpoints=_checkpoints(report, start, end),
        requests=requests,
        purged_in_period=purged,
        keys=keys,
        markers=markers,
        retention=retention,
        by_day=by_day,
        access=_payload_access(admin, tenant, start, end),
        admin_trail=next((r for r in admin_verification.reports if r.tenant == ADMIN_LOG), None),
    )


def _payload_access(
    admin: AuditAdmin, tenant: str, start: datetime, end: datetime
) -> list[PayloadAccess]:
    """The admin-action trail's records of the period that read ``tenant``'s payloads."""
    found = []
    for record in admin.export(ADMIN_LOG):
        header = record.header
        if not header or header.get("kind") != "admin":
            continue
        if header.get("action") not in PAYLOAD_ACTIONS:
            continue
        if not _in_period(str(header.get("time", "")), start, end):
            continue
        target = header.get("target")
        if not isinstance(target, dict):
            continue
        tenants = target.get("tenants")
        named = tenant == target.get("tenant") or (isinstance(tenants, list) and tenant in tenants)
        if not named:
            continue
        if "request_id" in target:
            what = f"request {target['request_id']}"
        elif header["action"] == "audit.find-prompt":
            what = f"prompts of {tenant} compared with {target.get('texts', '?')} text(s)"
        else:
            what = "whole log(s) of " + ", ".join(str(name) for name in tenants or [tenant])
        found.append(
            PayloadAccess(
                seq=record.seq,
                time=str(header.get("time", "")),
                actor=str(header.get("actor", "-")),
                role=str(header.get("role", "-")),
                action=str(header["action"]),
                target=what,
                reason=str(header.get("reason") or "-"),
                outcome=str(header.get("outcome", "-")),
                call_id=str(header.get("request_id", "-")),
            )
        )
    return found


def _in_period(time: str, start: datetime, end: datetime) -> bool:
    try:
        moment = datetime.fromisoformat(time)
    except ValueError:
        return False
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return start <= moment < end


def _overlaps(period: str, start: datetime, end: datetime) -> bool:
    for fmt, step in (("%Y-%m-%dT%H", "hour"), ("%Y-%m-%d", "day"), ("%Y-%m", "month")):
        try:
            first = datetime.strptime(period, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        if step == "hour":
            last = first + timedelta(hours=1)
        elif step == "day":
            last = first + timedelta(days=1)
        else:
            last = (first.replace(day=28) + timedelta(days=4)).replace(day=1)
        return first < end and start < last
    return False


def _facts(
    request_id: str,
    first: dict[str, Any],
    request: dict[str, Any] | None,
    answer: dict[str, Any] | None,
) -> RequestFacts:
    source = request or answer or first
    served = (answer or source).get("served_from")
    served_text = None
    if isinstance(served, dict):
        served_text = ", ".join(
            f"{name}: {served[name]}" for name in ("cache", "local") if name in served
        )
    redaction = source.get("redaction") or {}
    return RequestFacts(
        request_id=request_id,
        time=str(first.get("time", "")),
        outcome=str(answer.get("outcome")) if answer else NO_COMPLETION,
        status=answer.get("status") if answer else None,
        model=str(source.get("model") or "-"),
        route=str(source.get("route") or "-"),
        upstream=str((answer or {}).get("upstream") or ("local" if served_text else "-")),
        dialect=str(source.get("dialect") or "gemini"),
        served_from=served_text,
        config=source.get("config"),
        left=request is not None and "sent_digest" in request,
        redaction={
            str(kind): {str(action): int(number) for action, number in actions.items()}
            for kind, actions in redaction.items()
            if isinstance(actions, dict)
        },
        payload_key=(request or {}).get("payload_key"),
    )


def _marker(seq: int, header: dict[str, Any], verifier: CheckpointVerifier | None) -> PurgeMarker:
    note = str(header.get("note", ""))
    text = note.split("\n\n", 1)[0]
    signature = "not checked (no verifier key)"
    if verifier is not None:
        try:
            text = verifier.open_note(note)
            signature = "valid"
        except CheckpointError as exc:
            signature = f"INVALID: {exc}"
    lines = dict(line.split(" ", 1) for line in text.splitlines()[1:] if " " in line)
    return PurgeMarker(
        seq=seq,
        purged_below=int(lines.get("purged_below", header.get("purged_below", 0))),
        cutoff=lines.get("cutoff", "-"),
        time=lines.get("time", "-"),
        signature=signature if text.startswith(PURGE_HEADER) else "INVALID: not a purge note",
        note=note,
    )


def _checkpoints(
    report: TenantReport | None, start: datetime, end: datetime
) -> list[CheckpointRow]:
    """The verified checkpoints signed in the period, and the first one after it (the one
    that covers the period's last record)."""
    if report is None:
        return []
    ordered = sorted({(c.time, c.size, c.root) for c in report.signed})
    rows = []
    after_end = False
    for moment, size, root in ordered:
        inside = start <= moment < end
        first_after = moment >= end and not after_end
        if inside or first_after:
            rows.append(CheckpointRow(size, root.hex(), moment.isoformat(), first_after))
        after_end = after_end or moment >= end
    return rows


def _anchor_text(verification: AuditVerification) -> str:
    if verification.anchor_missing is not None:
        return f"FAILED: {verification.anchor_missing}"
    if verification.anchor_problems:
        return "FAILED: " + "; ".join(verification.anchor_problems)
    if verification.anchor_dir is None:
        return "none configured (audit.checkpoint_export_dir)"
    return "OK"
