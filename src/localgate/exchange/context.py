"""What one request carries through the pipeline."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from localgate.exchange.outcome import Outcome
from localgate.exchange.permit import Permit
from localgate.exchange.principal import ClientCertificate, Principal
from localgate.gemini.framing import Framing
from localgate.gemini.routes import GeminiRoute
from localgate.policy.snapshot import TenantPolicy

__all__ = ["Inbound", "RequestContext", "TokenUsage"]


@dataclass(frozen=True, slots=True)
class Inbound:
    """The client's request as the front door hands it over, body not yet read.

    ``read_body`` returns the parsed body and its size in bytes; it raises a
    ``LocalgateError`` (``ClientClosedRequest`` if the client goes away meanwhile).
    """

    credential: str | None
    read_body: Callable[[], Awaitable[tuple[Any, int]]]
    query: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    framing: Framing | None = None
    # The verified client certificate of the connection (mTLS), if one was presented.
    certificate: ClientCertificate | None = None


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Token counts from the answer's ``usageMetadata``."""

    prompt: int = 0
    candidates: int = 0
    thoughts: int = 0
    total: int = 0
    # The part of ``prompt`` read from the model's context cache (cachedContentTokenCount).
    cached: int = 0

    @classmethod
    def from_metadata(cls, metadata: Any) -> TokenUsage | None:
        """Read ``usageMetadata``; None if it is absent or not an object."""
        if not isinstance(metadata, dict):
            return None
        return cls(
            _count(metadata.get("promptTokenCount")),
            _count(metadata.get("candidatesTokenCount")),
            _count(metadata.get("thoughtsTokenCount")),
            _count(metadata.get("totalTokenCount")),
            _count(metadata.get("cachedContentTokenCount")),
        )


def _count(value: Any) -> int:
    """A token count as the answer gives it; anything but a number counts as 0."""
    return int(value) if isinstance(value, int | float) else 0


@dataclass(slots=True)
class RequestContext:
    """State of one request, filled in stage by stage."""

    request_id: str
    route: GeminiRoute | None
    client: str | None = None
    # The API dialect the client spoke: "gemini", or "openai" for the OpenAI-compatible
    # door (whose requests every stage sees translated to Gemini's).
    dialect: str = "gemini"
    received_at: float = field(default_factory=time.time)
    started: float = field(default_factory=time.perf_counter)
    principal: Principal | None = None
    # The tenant's policy, from the configuration current when the request was
    # authenticated; each stage reads its own section of it.
    policy: TenantPolicy | None = None
    body: Any = None
    # ``body`` as the JSON bytes that leave, serialised once by the pipeline just before
    # the request record (whose ``sent_digest`` covers them) and sent as they are by the
    # Gemini adapter; None until then.
    sent_body: bytes | None = None
    # Held from admission by the limits stage until the request ends. From admission on,
    # the audit trail records how the request ended; the completion gives it back.
    permit: Permit | None = None
    # The client's x-localgate-priority header, and the x-ratelimit-* headers the limits
    # stage gives every answer of an admitted request (set at admission).
    priority: str | None = None
    limit_headers: dict[str, str] | None = None
    # The attempt record, kept by the upstream dispatcher: the upstream of the latest
    # attempt and how many attempts were made (0: none, e.g. answered from the cache).
    upstream: str | None = None
    attempt: int = 0
    # Every attempt (and every upstream skipped), in order, for the audit record:
    # {"upstream", "status", "latency_ms"} or {"upstream", "skipped"}.
    attempts: list[dict[str, Any]] = field(default_factory=list)
    # The answer's last ``usageMetadata`` object, read into a TokenUsage (``usage``) only
    # by those who record it, once per request rather than once per stream event.
    usage_metadata: dict[str, Any] | None = None
    model_version: str | None = None
    # When the first answer event (or the unary answer) reached the response path
    # (perf_counter), for the time-to-first-token metric.
    first_answer_at: float | None = None
    # Owned by the redaction stage (opaque to every other: typed ``object``, so nothing
    # else can read it without the stage's own type): the request's placeholder table
    # lives here and nowhere else, and dies with the request.
    redaction: object | None = None
    redaction_summary: dict[tuple[str, str], int] = field(default_factory=dict)
    # Why the request was not redacted although its tenant's policy redacts: every
    # upstream it may reach is in-house with ``redaction: false``. Set before redaction;
    # the dispatcher then sends it to no upstream that needs a redacted request.
    redaction_skipped: str | None = None
    # The request's texts before redaction: only HMAC'd (and, if configured, encrypted)
    # by the audit stage; never logged.
    original_texts: list[str] = field(default_factory=list)
    end_user: str | None = None
    # The client's x-localgate-cache header (bypass, refresh) and the retrieval
    # collection its x-localgate-rag-collection header names.
    cache_control: str | None = None
    rag_collection: str | None = None
    # Owned by the cache stage (opaque to every other): what it needs to store this
    # request's answer; and what the x-localgate-cache response header says (hit, miss,
    # bypass, refresh).
    cache: object | None = None
    cache_status: str | None = None
    # Personal data the policy let through in clear (action allow): the cache must see
    # them as part of what a question is about. Set by the redaction stage.
    allowed_values: frozenset[str] = frozenset()
    # Whether the answer scan masked something the model produced: such an answer is
    # not kept anywhere in its raw form.
    answer_masked: bool = False
    # Where the answer came from when not from upstream, and the retrieved passages:
    # both go into the audit record (ids, never text).
    served_from: dict[str, Any] | None = None
    rag: dict[str, Any] | None = None
    # Headers a stage adds to the answer (x-localgate-rag); the pipeline sends them.
    reply_headers: dict[str, str] = field(default_factory=dict)
    audited: bool = False
    # The answer as the upstream sent it (placeholders, not values), for the audit record.
    answer_events: list[bytes] = field(default_factory=list)
    # Owned by telemetry (opaque to every other): the request's spans, when tracing is
    # on; and its W3C trace id (32 hex digits) for the access log and the audit record.
    trace: object | None = None
    trace_id: str | None = None
    # Owned by the quality stage (opaque to every other): what it notes of the answer; and
    # the answer's confidence for the audit record and access log (docs/quality.md).
    quality: object | None = None
    confidence: dict[str, Any] | None = None
    # How the request ended; set once, by the pipeline's completion (None while running).
    outcome: Outcome | None = None

    # ``usage`` as last read, and the metadata object it was read from: the completion
    # record, the limits' settlement, the access log and the trace each ask for it, and
    # it is read once.
    _usage_read_from: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _usage: TokenUsage | None = field(default=None, init=False, repr=False)

    @property
    def usage(self) -> TokenUsage | None:
        """Token counts of the answer, if it gave any."""
        metadata = self.usage_metadata
        if metadata is not self._usage_read_from:
            self._usage_read_from, self._usage = metadata, TokenUsage.from_metadata(metadata)
        return self._usage

    def observe_answer(self, answer: Any) -> None:
        """Note usage and model version from a response or stream event (the last one wins)."""
        if not isinstance(answer, dict):
            return
        metadata = answer.get("usageMetadata")
        if isinstance(metadata, dict):
            self.usage_metadata = metadata
        version = answer.get("modelVersion")
        if isinstance(version, str):
            self.model_version = version
