"""In-process stages for the pipeline tests: each notes its calls in one shared journal,
and can be told to refuse or fail."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from localgate.config import Settings
from localgate.errors import LocalgateError, ServiceUnavailable, Unauthenticated
from localgate.exchange.context import Inbound, RequestContext
from localgate.exchange.outcome import Outcome
from localgate.exchange.principal import Principal
from localgate.exchange.replies import UnaryReply
from localgate.exchange.stages import Permit, RedactionStage, Settlement
from localgate.gemini.routes import GeminiRoute, match_route
from localgate.identity.stage import IdentityStage
from localgate.observability import AccessLog, GatewayMetrics
from localgate.pipeline import Pipeline
from localgate.policy import PolicySnapshot, TenantPolicy
from localgate.upstream import Router, UpstreamDispatcher
from localgate.upstream.router import RoutePlan
from tests.upstream.fakes import ScriptedUpstream

__all__ = ["KEY", "Completed", "Gateway", "MakeGateway", "inbound", "new_context"]

KEY = "lg_good"
GENERATE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")


class Keys:
    """One key, of tenant acme."""

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal

    def authenticate(self, presented: str | None) -> Principal:
        self.journal.append("identity")
        if presented != KEY:
            raise Unauthenticated("Unknown key.")
        return Principal("acme", "k1")

    def check(self) -> None:
        return None


class CountingPermit:
    """Counts its releases."""

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal
        self.released = 0

    def release(self, settlement: Settlement) -> None:
        self.journal.append("permit released")
        self.released += 1


class Limits:
    """Admits every request with a counting permit."""

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal
        self.permits: list[CountingPermit] = []

    async def admit(self, ctx: RequestContext) -> Permit:
        self.journal.append("limits")
        permit = CountingPermit(self.journal)
        self.permits.append(permit)
        return permit


class Redaction:
    """Marks what it touched; refuses with ``error`` or fails with ``failure``."""

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal
        self.error: LocalgateError | None = None
        self.failure: Exception | None = None
        self.event_failure: Exception | None = None

    def redact_request(self, ctx: RequestContext, query: Sequence[tuple[str, str]] = ()) -> None:
        self.journal.append("redaction")
        if self.error is not None:
            raise self.error
        if self.failure is not None:
            raise self.failure

    def restore_answer(self, ctx: RequestContext, answer: Any) -> Any:
        self.journal.append("restore")
        return answer

    def restore_event(self, ctx: RequestContext, event: Any) -> Any:
        self.journal.append("restore event")
        if self.event_failure is not None:
            raise self.event_failure
        return event

    def finish_stream(self, ctx: RequestContext) -> list[Any]:
        self.journal.append("finish stream")
        return []

    def redact_added(self, ctx: RequestContext, text: str, where: str) -> str:
        return text


class Retrieval:
    """Adds nothing; refuses with ``error`` or fails with ``failure``."""

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal
        self.error: LocalgateError | None = None
        self.failure: Exception | None = None

    async def augment(self, ctx: RequestContext, redaction: RedactionStage) -> None:
        self.journal.append("retrieval")
        if self.error is not None:
            raise self.error
        if self.failure is not None:
            raise self.failure


class Cache:
    """Answers ``stored`` if set, else misses."""

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal
        self.stored: Any = None

    async def lookup(self, ctx: RequestContext) -> UnaryReply | None:
        self.journal.append("cache lookup")
        if self.stored is None:
            ctx.cache_status = "miss"
            return None
        ctx.cache_status = "hit; layer=exact"
        ctx.served_from = {"cache": "exact"}
        return UnaryReply(body=self.stored)

    def keep(self, ctx: RequestContext, answer: bytes) -> None:
        return None

    def complete(self, ctx: RequestContext) -> None:
        self.journal.append("cache complete")

    async def close(self) -> None:
        return None


@dataclass
class Completed:
    """One completion record as the audit stage was asked to write it."""

    request_id: str
    outcome: Outcome
    status: int
    answer_sent: bool


class Audit:
    """Keeps records in lists; refuses the request record or withholds answers when told."""

    keeps_answers = False

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal
        self.requests: list[str] = []
        self.completions: list[Completed] = []
        self.refuse_requests = False
        self.store_down = False  # completions cannot be written durably

    async def record_request(self, ctx: RequestContext) -> None:
        self.journal.append("audit request")
        if self.refuse_requests:
            raise ServiceUnavailable("The audit record could not be written.")
        self.requests.append(ctx.request_id)

    async def record_outcome(
        self, ctx: RequestContext, outcome: Outcome, status: int, *, answer_sent: bool = False
    ) -> None:
        self.journal.append(f"audit {outcome.value}")
        self.completions.append(Completed(ctx.request_id, outcome, status, answer_sent))
        if self.store_down and not answer_sent:
            raise ServiceUnavailable("The answer was withheld.")


# The default policy: the fake stages read none of it, the identity stage hands it over.
POLICIES = PolicySnapshot.build(Settings())


@dataclass
class Gateway:
    """A pipeline of fakes around one scripted upstream, and what it wrote."""

    tmp_path: Path
    upstream: ScriptedUpstream = field(default_factory=ScriptedUpstream)
    fallback: ScriptedUpstream | None = None
    max_attempts: int = 1
    journal: list[str] = field(default_factory=list)
    policies: PolicySnapshot = POLICIES

    def __post_init__(self) -> None:
        journal = self.journal
        for upstream in (self.upstream, self.fallback):
            if upstream is not None:
                upstream.journal = journal
        self.limits = Limits(journal)
        self.redaction = Redaction(journal)
        self.retrieval = Retrieval(journal)
        self.cache = Cache(journal)
        self.audit = Audit(journal)
        self.metrics = GatewayMetrics()
        self.access_log = AccessLog(self.tmp_path / "access.log")
        router = _ChainRouter(self.upstream, self.fallback)
        self.pipeline = Pipeline(
            identity=IdentityStage(Keys(journal), lambda: self.policies),
            limits=self.limits,
            redaction=self.redaction,
            retrieval=self.retrieval,
            cache=self.cache,
            audit=self.audit,
            dispatcher=UpstreamDispatcher(
                router, max_attempts=self.max_attempts, attempts_per_upstream=1
            ),
            access_log=self.access_log,
            metrics=self.metrics,
        )

    def access_records(self) -> list[dict[str, Any]]:
        """The access-log lines written so far."""
        self.access_log.flush()
        path = self.access_log.path
        lines = path.read_bytes().splitlines() if path.exists() else []
        return [orjson.loads(line) for line in lines]

    def requests_counted(self) -> float:
        """Requests counted in ``localgate_requests_total``, over every label."""
        return sum(
            sample.value
            for family in self.metrics.registry.collect()
            if family.name == "localgate_requests"
            for sample in family.samples
            if sample.name == "localgate_requests_total"
        )

    def permits_released(self) -> list[int]:
        """How often each permit handed out was released."""
        return [permit.released for permit in self.limits.permits]


# The make_gateway fixture: ``make_gateway(upstream, fallback=..., max_attempts=...)``.
MakeGateway = Callable[..., Gateway]


class _ChainRouter(Router):
    """The router with a second candidate behind the first, when there is one."""

    def __init__(self, first: ScriptedUpstream, second: ScriptedUpstream | None) -> None:
        super().__init__(first)
        self._chain = (first,) if second is None else (first, second)

    def plan(
        self,
        route: GeminiRoute,
        policy: TenantPolicy | None = None,
        *,
        tenant: str = "",
        user: str | None = None,
    ) -> RoutePlan:
        return RoutePlan(route, self._chain)


def new_context(route: GeminiRoute = GENERATE, request_id: str = "r1") -> RequestContext:
    """A request as the front door hands it to the pipeline."""
    return RequestContext(request_id=request_id, route=route, client="127.0.0.1")


def inbound(
    body: Any = None,
    *,
    key: str | None = KEY,
    journal: list[str] | None = None,
    failure: BaseException | None = None,
) -> Inbound:
    """The client's request; reading its body raises ``failure`` if given."""
    sent = body if body is not None else {"contents": [{"parts": [{"text": "hi"}]}]}

    async def read_body() -> tuple[Any, int]:
        if journal is not None:
            journal.append("body")
        if failure is not None:
            raise failure
        return sent, len(orjson.dumps(sent))

    return Inbound(credential=key, read_body=read_body)
