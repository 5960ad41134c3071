"""The quality stage on its own: what an answer says, what is marked, what is counted."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from localgate.config import PromptDriftSettings, QualitySettings
from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.exchange.principal import Principal
from localgate.exchange.stages import Settlement
from localgate.gemini.routes import match_route
from localgate.observability import AccessLog, GatewayMetrics
from localgate.pipeline import Completion
from localgate.policy.routing import ConfidenceRule
from localgate.quality import CONFIDENCE_HEADER, PromptDrift, QualityStage
from localgate.quality.answers import AnswerFacts
from localgate.vectorstore.embedders import Vectors
from tests.pipeline.fakes import Audit

GENERATE = match_route("POST", "/v1beta/models/gemini-2.5-flash:generateContent")
STREAM = match_route("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent")
COUNT = match_route("POST", "/v1beta/models/gemini-2.5-flash:countTokens")
RULE = ConfidenceRule(-1.0, "gemini-2.5-pro")


def gemini_answer(
    avg: float | None = None, reason: str = "STOP", tokens: int = 5, **extra: Any
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": [{"text": "x"}]}, "finishReason": reason}
    if avg is not None:
        candidate["avgLogprobs"] = avg
    return {
        "candidates": [candidate],
        "usageMetadata": {"candidatesTokenCount": tokens, "totalTokenCount": tokens + 8},
        "modelVersion": "gemini-2.5-flash-001",
        **extra,
    }


def context(route: Any = GENERATE) -> RequestContext:
    return RequestContext(request_id="r1", route=route, principal=Principal("acme", "k1"))


def test_token_logprobs_are_exact_and_the_weakest_candidate_counts() -> None:
    facts = AnswerFacts()
    facts.add(
        {
            "candidates": [
                {
                    "index": 0,
                    "avgLogprobs": -9.0,  # the tokens' own figures win over the average
                    "logprobsResult": {
                        "chosenCandidates": [{"logProbability": -0.1}, {"logProbability": -0.3}]
                    },
                },
                {"index": 1, "avgLogprobs": -0.5},
            ]
        }
    )

    assert facts.avg_logprob == pytest.approx(-0.5)


def test_a_streams_logprobs_and_finish_reason_add_up_over_its_events() -> None:
    facts = AnswerFacts()
    facts.add({"candidates": [{"avgLogprobs": -0.2}]})
    facts.add({"candidates": [{"avgLogprobs": -0.6, "finishReason": "SAFETY"}]})

    assert facts.avg_logprob == pytest.approx(-0.4)
    assert facts.outcome == "SAFETY"
    assert facts.refused


def test_a_blocked_prompt_and_odd_values_are_read_safely() -> None:
    facts = AnswerFacts()
    facts.add({"promptFeedback": {"blockReason": "SAFETY"}})
    facts.add({"candidates": [{"avgLogprobs": True, "finishReason": "NEW_REASON"}, "x"]})
    facts.add(["not", "an", "answer"])

    assert facts.outcome == "OTHER"  # a reason Gemini may add later
    assert facts.avg_logprob is None  # true is not a number here
    blocked = AnswerFacts()
    blocked.add({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}})
    assert blocked.outcome == "PROMPT_BLOCKED"
    assert blocked.refused


def test_a_low_answer_is_marked_and_a_confident_one_clears_the_mark() -> None:
    stage, ctx = QualityStage(), context()
    stage.begin(ctx, RULE)

    stage.observe_answer(ctx, gemini_answer(-2.0))
    assert ctx.reply_headers[CONFIDENCE_HEADER] == "low"
    assert stage.retry_model(ctx) == "gemini-2.5-pro"

    stage.retrying(ctx, "gemini-2.5-pro")
    assert stage.retry_model(ctx) is None  # once only
    stage.observe_answer(ctx, gemini_answer(-0.1))
    assert CONFIDENCE_HEADER not in ctx.reply_headers
    assert ctx.confidence is not None
    assert ctx.confidence["retried"]["first_avg_logprob"] == -2.0


def test_without_a_threshold_nothing_is_marked_but_drift_still_counts() -> None:
    stage, ctx = QualityStage(), context()
    stage.begin(ctx, None)

    stage.observe_answer(ctx, gemini_answer(-5.0))
    stage.finish(ctx, Outcome.FORWARDED)

    assert ctx.confidence is None
    assert CONFIDENCE_HEADER not in ctx.reply_headers
    assert stage.drift is not None
    assert [r.recent_answers for r in stage.drift.reports()] == [1]


def test_only_upstream_answers_of_generate_routes_count_for_drift() -> None:
    stage = QualityStage()
    for outcome in (Outcome.SERVED_FROM_CACHE, Outcome.UPSTREAM_ERROR, Outcome.CLIENT_DISCONNECTED):
        ctx = context()
        stage.begin(ctx, RULE)
        stage.observe_answer(ctx, gemini_answer(-0.1))
        stage.finish(ctx, outcome)
    counting = context(COUNT)
    stage.begin(counting, RULE)
    stage.observe_answer(counting, {"totalTokens": 3})
    stage.finish(counting, Outcome.FORWARDED)
    never_answered = context()
    stage.begin(never_answered, RULE)
    stage.finish(never_answered, Outcome.FORWARDED)

    assert stage.drift is not None
    assert stage.drift.reports() == []


def test_a_stream_is_judged_at_its_end(tmp_path: Path) -> None:
    metrics = GatewayMetrics()
    stage, ctx = QualityStage(metrics=metrics), context(STREAM)
    stage.begin(ctx, RULE)
    for avg in (-1.5, -2.5):
        stage.observe_event(ctx, gemini_answer(avg))

    stage.finish(ctx, Outcome.FORWARDED)

    assert ctx.confidence == {"avg_logprob": -2.0, "threshold": -1.0, "low": True}
    text = metrics.render().decode()
    assert 'localgate_quality_low_confidence_answers_total{model="gemini-2.5-flash"} 1.0' in text


class _Permit:
    def __init__(self) -> None:
        self.settlements: list[Settlement] = []

    def release(self, settlement: Settlement) -> None:
        self.settlements.append(settlement)


def test_the_completion_records_confidence_and_settles_both_answers_tokens(
    tmp_path: Path,
) -> None:
    stage, ctx = QualityStage(), context()
    permit = _Permit()
    ctx.permit = permit
    stage.begin(ctx, RULE)
    stage.observe_answer(ctx, gemini_answer(-3.0, tokens=100))  # 108 tokens in all
    stage.retrying(ctx, "gemini-2.5-pro")
    second = gemini_answer(-0.2, tokens=10)
    stage.observe_answer(ctx, second)
    ctx.observe_answer(second)
    access_log = AccessLog(tmp_path / "access.log")
    completion = Completion(Audit([]), access_log, GatewayMetrics(), stage)

    async def scenario() -> None:
        await completion.finish(ctx, Outcome.FORWARDED)
        await access_log.close()

    asyncio.run(scenario())

    assert [s.tokens for s in permit.settlements] == [18 + 108]
    assert '"confidence":{' in (tmp_path / "access.log").read_text()
    assert stage.drift is not None
    counted = {(r.model, r.recent_answers) for r in stage.drift.reports()}
    assert counted == {("gemini-2.5-flash", 1), ("gemini-2.5-pro", 1)}


def test_a_failed_retry_restores_the_first_answer_and_charges_nothing_extra() -> None:
    metrics = GatewayMetrics()
    stage, ctx = QualityStage(metrics=metrics), context()
    stage.begin(ctx, RULE)
    stage.observe_answer(ctx, gemini_answer(-3.0))
    stage.retrying(ctx, "gemini-2.5-pro")

    stage.retry_failed(ctx)
    stage.observe_answer(ctx, gemini_answer(-3.0))
    stage.finish(ctx, Outcome.FORWARDED)

    assert stage.extra_tokens(ctx) == 0
    assert ctx.confidence is not None
    assert ctx.confidence["low"] is True
    assert ctx.confidence["retried"]["failed"] is True
    assert stage.drift is not None
    assert [r.recent_answers for r in stage.drift.reports()] == [1]  # counted once
    assert 'result="failed"} 1.0' in metrics.render().decode()


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def prompts(**changes: Any) -> tuple[PromptDrift, _Clock, list[str]]:
    clock, embedded = _Clock(), list[str]()

    class Embedder:
        name = "test"
        space = "test"
        dimensions = 2

        def embed(self, texts: Sequence[str]) -> Vectors:
            embedded.extend(texts)
            angle = {"cats": 0.0, "tax": 1.5}
            return np.array([[np.cos(angle[t]), np.sin(angle[t])] for t in texts], dtype=np.float32)

    settings = PromptDriftSettings(
        **{
            "enabled": True,
            "tenants": ["acme"],
            "sample_rate": 1,
            "reference_prompts": 3,
            **changes,
        }
    )
    drift = PromptDrift(
        settings, window_s=60, slices=6, embedder=Embedder, clock=clock, random=lambda: 0.5
    )
    return drift, clock, embedded


def test_prompt_drift_compares_recent_prompts_with_the_reference_centroid() -> None:
    drift, clock, embedded = prompts()

    async def scenario() -> None:
        for text in ["cats"] * 5 + ["tax"] * 2:
            assert drift.offer("acme", text)
            await drift.drain()

    asyncio.run(scenario())

    assert embedded == ["cats"] * 5 + ["tax"] * 2
    (report,) = drift.reports()
    assert report.reference_fixed
    assert report.reference_similarity == pytest.approx(1.0)
    assert report.recent_prompts == 4
    # Two prompts on the reference's direction, two far from it.
    assert report.recent_similarity == pytest.approx((2 + 2 * np.cos(1.5)) / 4)
    clock.now += 120  # the window slides past them
    assert drift.reports()[0].recent_prompts == 0


def test_prompt_drift_samples_only_watched_tenants_and_within_its_budget() -> None:
    sampled = prompts(sample_rate=0.4)[0]
    assert not sampled.offer("acme", "cats")  # 0.5 is not within the 0.4 sample
    drift, _, embedded = prompts(max_pending=2)

    assert not drift.offer("globex", "cats")  # not watched
    assert drift.offer("acme", "cats")
    assert drift.offer("acme", "cats")
    assert not drift.offer("acme", "cats")  # the queue is full: skipped
    assert not drift.offer("acme", "")
    assert embedded == []  # nothing embedded on the request's path


def test_prompt_drift_needs_named_tenants() -> None:
    with pytest.raises(ValueError, match="name the tenants"):
        QualitySettings.model_validate({"drift": {"prompts": {"enabled": True}}})
