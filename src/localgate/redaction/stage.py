"""The redaction stage of the pipeline: tenant policy in, placeholders out and back."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from localgate.config import ENV_SIGNATURE_KEY, RedactionRule, RedactionSettings, Settings
from localgate.errors import LocalgateError
from localgate.exchange.context import RequestContext
from localgate.observability import GatewayMetrics
from localgate.patterns import compile_pattern
from localgate.policy.snapshot import PolicySnapshot
from localgate.redaction.answer import StreamAnswerRestorer, restore_answer
from localgate.redaction.custom import VALIDATORS, CustomRecognizer
from localgate.redaction.detector import Detector
from localgate.redaction.findings import Finding
from localgate.redaction.request import redact_request_body
from localgate.redaction.session import PolicyBlocked, RedactionSession, spaced
from localgate.redaction.signatures import SignatureSeal, seal_answer
from localgate.secret import load_key, load_or_create_key

__all__ = [
    "Detectors",
    "PolicyRedaction",
    "RedactionFailed",
    "build_detector",
    "new_session",
    "signature_seal",
]

logger = logging.getLogger("localgate")


class RedactionFailed(LocalgateError):
    """The redactor itself failed: the request is refused, never forwarded unredacted."""


def new_session(
    settings: Settings,
    policy: RedactionSettings,
    detector: Detector,
    *,
    reversible: bool = True,
    open_signature: Callable[[object], str | None] | None = None,
) -> RedactionSession:
    """A session applying ``policy`` and the configured custom rules' own actions."""
    return _session(
        policy,
        settings.proxy.redaction_rules,
        detector,
        reversible=reversible,
        open_signature=open_signature,
    )


def _session(
    policy: RedactionSettings,
    rules: Sequence[RedactionRule],
    detector: Detector,
    *,
    reversible: bool = True,
    open_signature: Callable[[object], str | None] | None = None,
    detect: Callable[[str], list[Finding]] | None = None,
) -> RedactionSession:
    return RedactionSession(
        policy,
        detector,
        {rule.type: rule.action for rule in rules},
        {rule.type: rule.replacement for rule in rules if rule.replacement is not None},
        reversible=reversible,
        open_signature=open_signature,
        detect=detect,
    )


def signature_seal(settings: Settings) -> SignatureSeal:
    """The seal of thought signatures: $LOCALGATE_SIGNATURE_KEY, else the key file
    (created on first start, except with ``database_url``: replicas behind one load
    balancer need the same key, so it is given to them)."""
    load = load_key if settings.shared_state else load_or_create_key
    return SignatureSeal(load(os.environ.get(ENV_SIGNATURE_KEY), settings.signature_key_path))


def build_detector(settings: Settings, redaction: RedactionSettings) -> Detector:
    """The detector for one policy: built-ins (names optional) plus the configured rules."""
    return _detector(redaction.detect_names, redaction.min_score, settings.proxy.redaction_rules)


def _detector(names: bool, min_score: float, rules: Sequence[RedactionRule]) -> Detector:
    custom = [
        CustomRecognizer(
            type=rule.type,
            pattern=compile_pattern(rule.pattern),
            validate=VALIDATORS[rule.validator] if rule.validator else None,
        )
        for rule in rules
    ]
    return Detector.builtin(names=names, extra=custom, min_score=min_score)


_DetectorKey = tuple[bool, float, tuple[RedactionRule, ...]]


class Detectors:
    """The detectors of the configured policies: one per (names on or off, minimum score,
    custom rules), built on first use and shared by every policy that needs it."""

    def __init__(self, rules: tuple[RedactionRule, ...] = ()) -> None:
        self._rules = rules
        self._built: dict[_DetectorKey, Detector] = {}
        self._wanted: set[_DetectorKey] = set()

    def for_policy(
        self, policy: RedactionSettings, rules: tuple[RedactionRule, ...] | None = None
    ) -> Detector:
        """The detector that ``policy`` (with ``rules``, else the configured ones) calls for."""
        key = (policy.detect_names, policy.min_score, self._rules if rules is None else rules)
        detector = self._built.get(key)
        if detector is None:
            detector = self._built[key] = _detector(*key)
        return detector

    def prepare(self, snapshot: PolicySnapshot) -> None:
        """Build the detectors ``snapshot``'s policies need (before it is swapped in), and
        forget those that neither it nor the snapshot before it uses."""
        keys = {
            (policy.redaction.detect_names, policy.redaction.min_score, policy.redaction_rules)
            for policy in snapshot.policies()
            if policy.redaction.enabled
        }
        built = dict(self._built)
        for key in keys - set(built):
            built[key] = _detector(*key)
        kept = keys | self._wanted
        # One assignment: the event loop's thread sees the old dict or the new one, whole.
        self._built = {key: detector for key, detector in built.items() if key in kept}
        self._wanted = keys


class _State:
    """What the stage keeps in a request's context."""

    __slots__ = ("seal", "session", "stream")

    def __init__(self, session: RedactionSession, seal: Callable[[str], str]) -> None:
        self.session = session
        self.seal = seal  # seals the upstream's thought signatures for this tenant
        self.stream: StreamAnswerRestorer | None = None


class PolicyRedaction:
    """Redacts requests by each tenant's policy and restores placeholders in answers."""

    def __init__(self, metrics: GatewayMetrics, signatures: SignatureSeal) -> None:
        self._metrics = metrics
        self._signatures = signatures
        self._detectors = Detectors()
        # The findings counter's series, looked up once each (labels() takes a lock and
        # builds its key on every call: ~1 us, several times a request). Types and actions
        # come from the configuration, so this stays small.
        self._series: dict[tuple[str, str], Any] = {}
        self._remembered = metrics.redaction_texts.labels("remembered")
        self._scanned = metrics.redaction_texts.labels("scanned")

    def prepare(self, snapshot: PolicySnapshot) -> None:
        """Build the detectors of a policy snapshot before it is used: at start, and for
        each reload before the swap, so no request pays for building them."""
        self._detectors.prepare(snapshot)

    def redact_request(self, ctx: RequestContext, query: Sequence[tuple[str, str]] = ()) -> None:
        """Rewrite ``ctx.body``; refuse (never forward) if anything goes wrong.

        The path's model name and the forwarded ``query`` parameters go upstream too,
        but cannot be rewritten: personal data in them refuses the request.
        """
        if ctx.principal is None or ctx.route is None or ctx.policy is None:
            raise RedactionFailed("Redaction needs an authenticated request.")
        tenant = ctx.principal.tenant
        policy = ctx.policy.redaction
        if not policy.enabled:
            return
        started = time.perf_counter()
        signatures = self._signatures
        rules = ctx.policy.redaction_rules
        detector = self._detectors.for_policy(policy, rules)
        session = _session(
            policy,
            rules,
            detector,
            open_signature=lambda presented: signatures.open(tenant, presented),
            # A conversation's earlier turns come back with every request: scanned once.
            # Remembered per tenant and end user (x-localgate-user): a conversation has
            # one of each, and nobody can time what a colleague sent.
            detect=detector.remembering(f"{tenant}\x00{ctx.end_user or ''}", self._texts),
        )
        try:
            _check_request_line(ctx, query, session)
            ctx.body = redact_request_body(ctx.route.method, ctx.body, session)
        except LocalgateError:
            self._count(session)
            ctx.redaction_summary = dict(session.counts)
            raise
        except Exception as exc:
            logger.exception("redaction failed for request %s", ctx.request_id)
            raise _failed(ctx) from exc
        self._count(session)
        self._metrics.redaction_seconds.observe(time.perf_counter() - started)
        ctx.redaction = _State(session, lambda signature: signatures.seal(tenant, signature))
        ctx.redaction_summary = dict(session.counts)
        ctx.original_texts = session.original_texts
        ctx.allowed_values = frozenset(session.allowed_values)

    def restore_answer(self, ctx: RequestContext, answer: Any) -> Any:
        """A whole answer with this request's placeholders replaced by the values."""
        state = ctx.redaction
        if not isinstance(state, _State):
            return answer
        restored = restore_answer(answer, state.session.pseudonyms, self._scanner(state))
        self._count_answer(ctx, state)
        return seal_answer(restored, state.seal)

    def restore_event(self, ctx: RequestContext, event: Any) -> Any:
        """One stream event, restored; a split placeholder waits for its other half."""
        state = ctx.redaction
        if not isinstance(state, _State):
            return event
        if state.stream is None:
            state.stream = StreamAnswerRestorer(state.session.pseudonyms, self._scanner(state))
        restored = state.stream.event(event)
        self._count_answer(ctx, state)
        return seal_answer(restored, state.seal)

    def finish_stream(self, ctx: RequestContext) -> list[Any]:
        """Events for text still held back when the upstream's stream ended."""
        state = ctx.redaction
        if not isinstance(state, _State) or state.stream is None:
            return []
        events = state.stream.finish()
        self._count_answer(ctx, state)
        if state.stream.dangling:
            self._metrics.restore_dangling.inc(state.stream.dangling)
        return events

    def redact_added(self, ctx: RequestContext, text: str, where: str) -> str:
        """Text the gateway adds to the request, redacted with the request's own table."""
        state = ctx.redaction
        if not isinstance(state, _State):
            return text
        session = state.session
        before = session.counts.copy()
        try:
            redacted = session.redact(text, where)
        except LocalgateError:
            raise
        except Exception as exc:
            logger.exception("redaction of added text failed for request %s", ctx.request_id)
            raise _failed(ctx) from exc
        # Counted like the prompt's own findings: in the metrics and the audit record.
        self._count(session, since=before)
        ctx.redaction_summary = dict(session.counts)
        ctx.allowed_values = frozenset(session.allowed_values)
        return redacted

    def _texts(self, remembered: bool) -> None:
        (self._remembered if remembered else self._scanned).inc()

    @staticmethod
    def _scanner(state: _State) -> RedactionSession | None:
        return state.session if state.session.settings.scan_answers else None

    def _count_answer(self, ctx: RequestContext, state: _State) -> None:
        counts = state.session.answer_counts
        if counts:
            ctx.answer_masked = True
        for entity_type, count in counts.items():
            self._findings(entity_type, "mask_in_answer").inc(count)
        counts.clear()

    def _count(
        self, session: RedactionSession, since: Counter[tuple[str, str]] | None = None
    ) -> None:
        counts = session.counts - since if since is not None else session.counts
        for (entity_type, action), count in counts.items():
            self._findings(entity_type, action).inc(count)

    def _findings(self, entity_type: str, action: str) -> Any:
        """The findings counter's series for one type and action."""
        series = self._series.get((entity_type, action))
        if series is None:
            series = self._metrics.redaction_findings.labels(entity_type, action)
            self._series[(entity_type, action)] = series
        return series


def _check_request_line(
    ctx: RequestContext, query: Sequence[tuple[str, str]], session: RedactionSession
) -> None:
    """Refuse personal data in the model name or a forwarded query parameter; the refused
    model name is recorded (access log, audit trail) redacted."""
    route = ctx.route
    if route is not None and route.model_id is not None:
        found = session.refusals(route.model_id)
        if not found and _DIGIT_RUN.search(route.model_id):
            found = ["a run of 9 or more digits"]
        if found:
            ctx.route = dataclasses.replace(route, model_id=session.typed(spaced(route.model_id)))
            raise PolicyBlocked(
                f"The model name in the request path contains personal data ({', '.join(found)})"
                "; localgate does not forward it. Use a model name such as gemini-2.5-flash."
            )
    for name, value in query:
        found = session.refusals(value)
        if not found and _DIGIT_RUN.search(value):
            found = ["a run of 9 or more digits"]
        if found:
            raise PolicyBlocked(
                f"The query parameter {name!r} contains personal data ({', '.join(found)}); "
                "localgate does not forward it. Remove it and send the request again."
            )


# No model name, list filter or page token has nine digits in a row, separators between
# them or not (dates are eight; a run of nine in base64 is a one in 10^7 chance): a phone
# number, an ID or a card does, spelled out digit by digit or not.
_DIGIT_RUN = re.compile(r"[0-9](?:[-_.@ ()/]?[0-9]){8,}")


def _failed(ctx: RequestContext) -> RedactionFailed:
    return RedactionFailed(
        f"Redaction failed inside localgate (request id {ctx.request_id}); the request was "
        "refused and nothing was forwarded."
    )
