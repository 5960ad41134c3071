"""What the admin API takes and returns: pydantic models, from which the OpenAPI document
is generated (``routing.openapi_document``), so the document cannot drift from the code.

The admin services' dataclasses (``TenantSummary``, ``ApiKeyRecord``, ...) are used as
they are wherever they already say what a client needs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from localgate.admin.audit_search import ModelUsage
from localgate.admin.cache import CacheStats, CollectionInfo
from localgate.admin.keys import ApiKeyRecord
from localgate.admin.operators import Role, TokenRecord, UserRecord
from localgate.admin.tenants import TenantSummary

__all__ = [
    "AuditRecordOut",
    "AuditSearchParams",
    "AuditSearchResult",
    "CacheParams",
    "CacheStatsOut",
    "CheckpointOut",
    "CheckpointsOut",
    "CheckpointsParams",
    "ClearedOut",
    "CollectionsOut",
    "ConfigOut",
    "DecryptRequest",
    "DecryptedOut",
    "DecryptedRecord",
    "ErrorEnvelope",
    "Finding",
    "KeyCreate",
    "KeyCreated",
    "KeyList",
    "LimitUsageOut",
    "LimitsOut",
    "LoginRequest",
    "LoginResult",
    "OidcCallbackParams",
    "Ok",
    "ProofOut",
    "ProofParams",
    "RecordsOut",
    "RedactRequest",
    "RedactResult",
    "ReloadOut",
    "SignedOut",
    "TenantList",
    "TenantVerification",
    "TokenCreate",
    "TokenCreated",
    "TokenList",
    "UpstreamOut",
    "UpstreamsOut",
    "UsageOut",
    "UsageParams",
    "UserCreate",
    "UserCreated",
    "UserList",
    "VerifierKeyOut",
    "VerifyJobOut",
    "VerifyJobRequest",
    "VerifyOut",
    "VerifyParams",
    "WhoAmI",
    "WorkerReloadOut",
]

# Tenant names as the key store accepts them; "_admin" names the admin-action trail.
TENANT_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$"


class Body(BaseModel):
    """A request body or query: unknown fields are refused, not ignored."""

    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    """Why a request was refused."""

    code: int
    message: str
    status: str


class ErrorEnvelope(BaseModel):
    """Every refusal: ``{"error": {"code", "message", "status"}}``, code = HTTP status."""

    error: ErrorDetail


class Ok(BaseModel):
    """Done; nothing more to say."""

    ok: bool = True


class WhoAmI(BaseModel):
    """The caller, as the API sees it."""

    name: str
    role: Role
    tenant: str | None
    via: Literal["token", "session"]


class LoginRequest(Body):
    """A local user's name and password."""

    name: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=1024)


class LoginResult(BaseModel):
    """A session opened (its id is in the cookie); send ``csrf_token`` back in the
    ``x-csrf-token`` header with every change."""

    name: str
    role: Role
    tenant: str | None
    csrf_token: str
    expires_at: datetime


class OidcCallbackParams(Body):
    """What the identity provider sends the browser back with: a code and the state, or
    an error."""

    code: str | None = Field(None, min_length=1, max_length=4096)
    state: str | None = Field(None, min_length=1, max_length=200)
    error: str | None = Field(None, max_length=200)
    error_description: str | None = Field(None, max_length=2000)
    # Providers may add these; they are not used.
    session_state: str | None = Field(None, max_length=2000)
    iss: str | None = Field(None, max_length=2000)


class TenantList(BaseModel):
    """Tenants and their effective policies."""

    tenants: list[TenantSummary]


class KeyList(BaseModel):
    """Tenant keys: ids and states, never secrets."""

    keys: list[ApiKeyRecord]


class UsageParams(Body):
    """The time range (each bound optional; ``until`` exclusive)."""

    since: datetime | None = None
    until: datetime | None = None


class UsageOut(BaseModel):
    """A tenant's completed requests: by outcome, and per model with their tokens."""

    tenant: str
    requests: int
    outcomes: dict[str, int]
    models: dict[str, ModelUsage]


class KeyCreate(Body):
    """A new key's label (for people; it is not secret)."""

    label: str = Field("", max_length=200)


class KeyCreated(BaseModel):
    """A new key; ``key`` is shown this once and stored nowhere."""

    tenant: str
    key_id: str
    key: str


class AuditSearchParams(Body):
    """What to look for in the audit trail; each given field must match."""

    tenant: str | None = Field(None, pattern=TENANT_PATTERN)
    since: datetime | None = None
    until: datetime | None = None
    request_id: str | None = Field(None, min_length=1, max_length=200)
    trace_id: str | None = Field(None, min_length=1, max_length=200)
    outcome: str | None = Field(None, min_length=1, max_length=100)
    model: str | None = Field(None, min_length=1, max_length=200)
    kind: Literal["request", "answer", "purge", "admin"] | None = None
    after_tenant: str | None = Field(None, pattern=TENANT_PATTERN)
    after_seq: int | None = Field(None, ge=0)
    limit: int = Field(50, ge=1, le=500)


class AuditRecordOut(BaseModel):
    """A record's place and metadata (its header); contents stay encrypted."""

    tenant: str
    seq: int
    kind: str
    request_id: str
    header: dict[str, Any]


class AuditSearchResult(BaseModel):
    """A page of records; ``next`` continues it (pass as after_tenant, after_seq)."""

    records: list[AuditRecordOut]
    next: dict[str, Any] | None


class RecordsOut(BaseModel):
    """The records of one request: metadata only."""

    records: list[AuditRecordOut]


class DecryptRequest(Body):
    """Why the payload is being read: recorded in the admin-action trail."""

    reason: str = Field(min_length=8, max_length=1000)


class DecryptedRecord(BaseModel):
    """A record with its decrypted contents (or why a content is unavailable)."""

    tenant: str
    seq: int
    header: dict[str, Any]
    payload: Any = None
    original_prompt: Any = None


class DecryptedOut(BaseModel):
    """The decrypted records of one request."""

    records: list[DecryptedRecord]


class ProofParams(Body):
    """Which of the request's records to prove."""

    kind: Literal["request", "answer"] = "request"


class ProofOut(BaseModel):
    """A proof bundle: a record's inclusion in its log, as ``localgate audit check-proof``
    reads it (docs/audit.md, "Proof bundles"). Binary fields are base64."""

    format: str
    suite: str
    origin: str  # the signed checkpoint's origin line: the log's name
    tenant: str
    seq: int
    leaf_index: int  # = seq
    tree_size: int
    header: str  # the leaf: the record's canonical header bytes
    leaf_hash: str
    proof: list[str]
    root: str
    checkpoint: str  # the signed note (C2SP signed-note, Ed25519)
    ciphertexts: dict[str, str]  # "payload", "prompt": encrypted, as stored


class VerifierKeyOut(BaseModel):
    """The published verifier key of this gateway's logs (``localgate audit verifier-key``):
    ``<name>+<key id>+base64(0x01 || Ed25519 public key)``; compare its key id with the
    key you hold before trusting a check made with it."""

    verifier_key: str
    name: str
    key_id: str  # 8 hex digits


class VerifyParams(Body):
    """Whose log to verify (every log's if none)."""

    tenant: str | None = Field(None, pattern=TENANT_PATTERN)


class TenantVerification(BaseModel):
    """One log's verification."""

    tenant: str
    ok: bool
    records: int
    checkpoints: int
    problem: str | None
    warnings: list[str]


class VerifyOut(BaseModel):
    """What ``localgate audit verify`` would say."""

    ok: bool
    signatures_checked: bool
    anchor_missing: str | None
    anchor_problems: list[str]
    tenants: list[TenantVerification]


class VerifyJobRequest(Body):
    """Whose log to verify in the background (every log's if none)."""

    tenant: str | None = Field(None, pattern=TENANT_PATTERN)


class VerifyJobOut(BaseModel):
    """A background verification: ``none`` (never ran here), ``running`` (``checked`` of
    ``total`` records so far), ``done`` (``result``, computed at ``finished_at``) or
    ``failed`` (``error``)."""

    state: Literal["none", "running", "done", "failed"]
    tenant: str | None
    started_by: str | None
    started_at: datetime | None
    finished_at: datetime | None
    checked: int
    total: int
    result: VerifyOut | None
    error: str | None


class CheckpointsParams(Body):
    """Whose checkpoints (every log's if none)."""

    tenant: str | None = Field(None, pattern=TENANT_PATTERN)


class CheckpointOut(BaseModel):
    """A signed head of a log: its size, the time it states, and who signed it
    (``<key name>+<key id>``, as read from the note, not verified here)."""

    tenant: str
    size: int
    note: str
    time: datetime | None = None
    signers: list[str] = Field(default_factory=list)


class CheckpointsOut(BaseModel):
    """Signed checkpoints, smallest first per log."""

    checkpoints: list[CheckpointOut]


class SignedOut(BaseModel):
    """The logs whose heads were just signed."""

    signed: list[CheckpointOut]


class CacheParams(Body):
    """Whose cache (every tenant's if none)."""

    tenant: str | None = Field(None, pattern=TENANT_PATTERN)


class CacheStatsOut(BaseModel):
    """What the answer cache holds."""

    caches: list[CacheStats]


class CollectionsOut(BaseModel):
    """Retrieval collections, per embedding space, with their passage counts."""

    collections: list[CollectionInfo]


class ClearedOut(BaseModel):
    """The collections dropped."""

    collections: list[str]


class WorkerReloadOut(BaseModel):
    """What a reload did in one worker of ``localgate serve --workers N``: ``outcome`` is
    applied, rejected (``problems``), restarted (a new process since: it read the file as it
    started), starting (not running yet: it reads the file as it starts) or "no answer"
    (it did not report within the wait); the version and hash it runs after it."""

    worker: int
    pid: int | None
    outcome: str
    version: int | None
    hash: str | None
    problems: list[str]
    restart_needed: list[str]


class ReloadOut(BaseModel):
    """What a reload did: applied or rejected (``problems``: "field.path: reason"). With
    several workers, every worker reloads and ``workers`` has each one's outcome; then
    ``applied`` says whether every worker applied it, ``problems`` are those of the workers
    that did not, and the version and hash are those of the worker that answered."""

    applied: bool
    version: int
    hash: str
    at: float
    problems: list[str]
    restart_needed: list[str]
    workers: list[WorkerReloadOut] = []


class ConfigOut(BaseModel):
    """The configuration running: its version and hash (as audit records name it), its
    file, and the last reload's result (``running`` false: no gateway in this process;
    then the hash is of the file this listener started with)."""

    localgate_version: str
    running: bool
    version: int | None
    hash: str
    source: str | None
    reload_attempts: int
    last_reload: ReloadOut | None


class UpstreamOut(BaseModel):
    """One upstream: whether it can forward, and its circuit breaker's state."""

    name: str
    local: bool
    ready: str | None  # None: usable; else what is missing
    circuit: str  # closed, open, half_open; "closed" before its first call


class UpstreamsOut(BaseModel):
    """The running gateway's upstreams."""

    upstreams: list[UpstreamOut]


class RedactRequest(Body):
    """Text to try the redactor on, under a tenant's policy (the global one if none)."""

    text: str = Field(max_length=200_000)
    tenant: str | None = Field(None, pattern=TENANT_PATTERN)


class Finding(BaseModel):
    """One detected entity."""

    type: str
    start: int
    end: int
    action: str
    score: float


class RedactResult(BaseModel):
    """What would be sent (None when the policy blocks it), and what was found."""

    sent: str | None
    blocked: bool
    message: str | None
    findings: list[Finding]


class TokenList(BaseModel):
    """Admin API tokens (no secrets)."""

    tokens: list[TokenRecord]


class UserList(BaseModel):
    """Local users (no password hashes)."""

    users: list[UserRecord]


class TokenCreate(Body):
    """A new admin token: its role (a tenant-admin's names its tenant, no other role's
    does), how long it lasts (``30d``, ``12h``, ``45m``, ``90s``; none: until revoked)
    and a label for people."""

    role: Role
    tenant: str | None = Field(None, pattern=TENANT_PATTERN)
    expires: str | None = Field(None, pattern=r"^[1-9][0-9]{0,5}[dhms]$")
    label: str = Field("", max_length=200)


class TokenCreated(BaseModel):
    """A new admin token; ``token`` is shown this once and stored only hashed."""

    token_id: str
    role: Role
    tenant: str | None
    expires_at: str | None
    token: str


class UserCreate(Body):
    """A new local user (the password: at least 12 characters, stored as argon2id)."""

    name: str = Field(min_length=1, max_length=64)
    role: Role
    tenant: str | None = Field(None, pattern=TENANT_PATTERN)
    password: str = Field(min_length=12, max_length=1024)


class UserCreated(BaseModel):
    """The user created."""

    user: UserRecord


LimitName = Literal[
    "requests_per_minute", "tokens_per_minute", "tokens_per_day", "concurrent_requests"
]


class LimitUsageOut(BaseModel):
    """One of a tenant's limits (``value`` None: no such limit), what the limits backend
    has counted against it now (requests in flight, for concurrency), and the seconds until
    its window resets (None: no window open, or concurrency)."""

    limit: LimitName
    value: int | None
    used: int
    resets_in_s: float | None


class LimitsOut(BaseModel):
    """A tenant's limits against the running gateway's counters: ``memory`` counts this
    process's requests only, ``redis`` every replica's."""

    tenant: str
    backend: Literal["memory", "redis"]
    limits: list[LimitUsageOut]
