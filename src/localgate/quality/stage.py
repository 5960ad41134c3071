"""The quality stage: marks low-confidence answers, says when one is worth asking a
stronger model, and feeds each upstream answer to drift (docs/quality.md).

The pipeline calls it at four points: ``begin`` once the request's route is planned,
``sample_prompt`` after redaction, ``observe_answer``/``observe_event`` for each answer
or stream event, and the completion calls ``finish`` before the audit record is written.
Only generateContent and streamGenerateContent are looked at.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from localgate.config import QualitySettings
from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.gemini.routes import GeminiMethod
from localgate.gemini.texts import last_turn_text
from localgate.observability import GatewayMetrics
from localgate.observability.quality import QualityMetrics
from localgate.policy.routing import ConfidenceRule
from localgate.quality.answers import AnswerFacts
from localgate.quality.drift import DriftMonitor
from localgate.quality.prompts import PromptDrift
from localgate.vectorstore.embedders import Embedder, HashingEmbedder

__all__ = ["CONFIDENCE_HEADER", "QualityStage"]

# On a unary answer below its route's threshold: "low". (Streams send their headers
# before the answer exists: they are marked in the metric and audit record only.)
CONFIDENCE_HEADER = "x-localgate-confidence"
_GENERATING = frozenset({GeminiMethod.GENERATE_CONTENT, GeminiMethod.STREAM_GENERATE_CONTENT})
# How often the drift references are saved while the gateway runs (and once at shutdown).
_SAVE_EVERY_S = 300.0

logger = logging.getLogger("localgate.quality")


@dataclass(slots=True)
class _Request:
    """What the stage keeps for one request (``ctx.quality``)."""

    rule: ConfidenceRule | None
    model: str
    facts: AnswerFacts = field(default_factory=AnswerFacts)
    answered: bool = False
    # A low-confidence first answer asked again on a stronger model: that answer, its model.
    first: AnswerFacts | None = None
    first_model: str | None = None
    retry_failed: bool = False
    marked: bool = False  # ``ctx.confidence`` says what the answer in ``facts`` is
    counted: bool = False  # the answer in ``facts`` already went to drift and metrics


class QualityStage:
    """Confidence marking and drift; built from the ``quality:`` section.

    ``clock``, ``random`` and ``embedder`` are injectable so tests need no waiting and no
    real sampling.
    """

    def __init__(
        self,
        settings: QualitySettings | None = None,
        metrics: GatewayMetrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        random: Callable[[], float] = random.random,
        embedder: Callable[[], Embedder] = HashingEmbedder,
        state_path: Path | None = None,
    ) -> None:
        settings = settings or QualitySettings()
        drift = settings.drift
        self._state_path = state_path if drift.enabled and drift.persist else None
        self._saver: asyncio.Task[None] | None = None
        self.drift = DriftMonitor(drift, clock) if drift.enabled else None
        self.prompts = (
            PromptDrift(
                drift.prompts,
                window_s=drift.recent_window_s,
                slices=drift.slices,
                embedder=embedder,
                clock=clock,
                random=random,
            )
            if drift.enabled and drift.prompts.enabled
            else None
        )
        self._metrics: QualityMetrics | None = metrics.quality if metrics else None
        if self._metrics is not None:
            if self.drift is not None:
                self._metrics.add_source(self.drift.readings)
            if self.prompts is not None:
                self._metrics.add_source(self.prompts.readings)

    async def start(self) -> None:
        """Take up the saved drift references; begin embedding sampled prompts and saving
        the references now and then (each if configured)."""
        if self._state_path is not None:
            await asyncio.to_thread(self.load)
            self._saver = asyncio.create_task(self._save_forever())
        if self.prompts is not None:
            await self.prompts.start()

    async def close(self) -> None:
        """Stop the workers; save the drift references."""
        if self.prompts is not None:
            await self.prompts.close()
        if self._saver is not None:
            self._saver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._saver
            self._save_logged()

    def load(self) -> int:
        """Restore the drift references saved by an earlier run; how many. A missing file
        is a first start; an unreadable one is logged and left for a fresh start."""
        path = self._state_path
        if path is None or self.drift is None:
            return 0
        try:
            restored = self.drift.restore(orjson.loads(path.read_bytes()))
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as exc:
            logger.warning(
                "quality: drift references in %s not used (%s); starting afresh", path, exc
            )
            return 0
        logger.info("quality: %d drift reference(s) taken up from %s", restored, path)
        return restored

    def save(self) -> None:
        """Write the drift references (atomically: a crash leaves the last good file)."""
        if self._state_path is not None and self.drift is not None:
            self._write(self._state_path, orjson.dumps(self.drift.saved()))

    @staticmethod
    def _write(path: Path, state: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.partial")
        partial.write_bytes(state)
        os.replace(partial, path)

    def _save_logged(self) -> None:
        try:
            self.save()
        except OSError:
            logger.exception("quality: saving the drift references failed")

    async def _save_forever(self) -> None:
        path = self._state_path
        while path is not None and self.drift is not None:
            await asyncio.sleep(_SAVE_EVERY_S)
            # Read on the event loop's thread (a consistent picture), written off it.
            state = orjson.dumps(self.drift.saved())
            try:
                await asyncio.to_thread(self._write, path, state)
            except OSError:
                logger.exception("quality: saving the drift references failed")

    # -- the request's path ----------------------------------------------------

    def begin(self, ctx: RequestContext, rule: ConfidenceRule | None) -> None:
        """Watch this request's answer under ``rule`` (None: no threshold applies)."""
        route = ctx.route
        if route is None or route.method not in _GENERATING:
            return
        if rule is None and self.drift is None:
            return
        ctx.quality = _Request(rule, route.model_id or "")

    def sample_prompt(self, ctx: RequestContext) -> None:
        """Offer the request's redacted last turn to prompt drift (sampled)."""
        if self.prompts is None or ctx.principal is None or not isinstance(ctx.body, dict):
            return
        route = ctx.route
        if route is None or route.method not in _GENERATING:
            return
        self.prompts.offer(ctx.principal.tenant, last_turn_text(ctx.body))

    def observe_event(self, ctx: RequestContext, event: Any) -> None:
        """Note one stream event."""
        state = ctx.quality
        if isinstance(state, _Request):
            state.facts.add(event)
            state.answered = True

    def observe_answer(self, ctx: RequestContext, answer: Any) -> None:
        """Note a whole (unary) answer, and mark it if its confidence is low."""
        state = ctx.quality
        if not isinstance(state, _Request):
            return
        state.facts = AnswerFacts()
        state.facts.add(answer)
        state.answered = True
        if state.rule is None:
            return
        if _mark(ctx, state):
            ctx.reply_headers[CONFIDENCE_HEADER] = "low"
        else:
            ctx.reply_headers.pop(CONFIDENCE_HEADER, None)

    def retry_model(self, ctx: RequestContext) -> str | None:
        """The stronger model to ask, if the unary answer just observed is below its
        route's threshold and the route names one (and it has not been asked yet)."""
        state = ctx.quality
        if not isinstance(state, _Request) or state.first is not None or state.rule is None:
            return None
        retry_on = state.rule.retry_on
        if retry_on is None or retry_on == state.model or not _low(state):
            return None
        return retry_on

    def retrying(self, ctx: RequestContext, model: str) -> None:
        """The answer observed is set aside: ``model`` is asked next. It counts for its own
        model's drift and metrics now."""
        state = ctx.quality
        if not isinstance(state, _Request):
            return
        self._count(state)
        state.first, state.first_model = state.facts, state.model
        state.facts, state.model, state.counted = AnswerFacts(), model, False
        state.marked = False

    def retry_failed(self, ctx: RequestContext) -> None:
        """The stronger model could not answer: the first answer is the request's after all."""
        state = ctx.quality
        if not isinstance(state, _Request):
            return
        if state.first is None or state.first_model is None:
            # Refused before it was sent (routing, residency): the first answer is uncounted.
            state.first, state.first_model = state.facts, state.model
        else:
            state.facts, state.model, state.counted = state.first, state.first_model, True
        state.retry_failed, state.marked = True, False
        if self._metrics is not None:
            self._metrics.retried(state.first_model, "failed")

    def extra_tokens(self, ctx: RequestContext) -> int:
        """Tokens of a first answer set aside for a stronger model's: the request used
        them too, and the limits settle them with the answer's own."""
        state = ctx.quality
        if not isinstance(state, _Request) or state.first is None or state.retry_failed:
            return 0
        return state.first.total_tokens or 0

    # -- the end ----------------------------------------------------------------

    def finish(self, ctx: RequestContext, outcome: Outcome) -> None:
        """The request ended as ``outcome``: mark a stream's answer, count an upstream
        answer for drift and the metrics (cached answers are marked, not counted)."""
        state = ctx.quality
        if not isinstance(state, _Request) or not state.answered:
            return
        if state.rule is not None and not state.marked:  # a stream, or a first answer restored
            _mark(ctx, state)
        if state.first is not None and not state.retry_failed and self._metrics is not None:
            result = "low" if _low(state) else "confident"
            self._metrics.retried(state.first_model or "", result)
        if outcome is Outcome.FORWARDED and not state.counted:
            self._count(state)

    def _count(self, state: _Request) -> None:
        state.counted = True
        if self.drift is not None:
            self.drift.observe(state.model, state.facts)
        scored = state.rule is not None and state.facts.avg_logprob is not None
        if self._metrics is not None and scored:
            self._metrics.scored(state.model, low=_low(state))


def _low(state: _Request) -> bool:
    average = state.facts.avg_logprob
    return state.rule is not None and average is not None and average < state.rule.min_avg_logprob


def _mark(ctx: RequestContext, state: _Request) -> bool:
    """Write the answer's confidence for the audit record and access log; whether low."""
    state.marked = True
    rule = state.rule
    average = state.facts.avg_logprob if rule is not None else None
    if rule is None or (average is None and state.first is None):
        ctx.confidence = None
        return False
    low = average is not None and average < rule.min_avg_logprob
    confidence: dict[str, Any] = {
        "avg_logprob": round(average, 6) if average is not None else None,
        "threshold": rule.min_avg_logprob,
        "low": low,
    }
    if state.first is not None:
        first = state.first.avg_logprob
        confidence["retried"] = {
            "from": state.first_model,
            "to": rule.retry_on,
            "first_avg_logprob": round(first, 6) if first is not None else None,
            "first_total_tokens": state.first.total_tokens,
            "failed": state.retry_failed,
        }
    ctx.confidence = confidence
    return low
