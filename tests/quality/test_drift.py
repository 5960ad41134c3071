"""Drift on synthetic answer streams: a shift is seen, an unchanged model raises nothing."""

from __future__ import annotations

import random
from typing import Any

import pytest

from localgate.config import DriftSettings, QualitySettings
from localgate.observability import GatewayMetrics
from localgate.quality import DriftMonitor
from localgate.quality.answers import AnswerFacts
from localgate.quality.stage import QualityStage

# The shipped alert fires above this (deploy/prometheus/alerts.yml).
ALERT_THRESHOLD = 0.1


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def answer(
    tokens: int,
    reason: str = "STOP",
    *,
    version: str = "gemini-2.5-flash-001",
    avg_logprob: float | None = None,
) -> AnswerFacts:
    body: dict[str, Any] = {
        "candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": reason}],
        "usageMetadata": {"candidatesTokenCount": tokens},
        "modelVersion": version,
    }
    if avg_logprob is not None:
        body["candidates"][0]["avgLogprobs"] = avg_logprob
    facts = AnswerFacts()
    facts.add(body)
    return facts


def usual(rng: random.Random, version: str = "gemini-2.5-flash-001") -> AnswerFacts:
    """An answer of the model as it was: ~300 tokens, mostly STOP, rare SAFETY."""
    reason = rng.choices(["STOP", "MAX_TOKENS", "SAFETY"], [0.9, 0.08, 0.02])[0]
    return answer(
        max(1, int(rng.gauss(300, 80))), reason, version=version, avg_logprob=rng.gauss(-0.3, 0.05)
    )


def shifted(rng: random.Random, version: str = "gemini-2.5-flash-001") -> AnswerFacts:
    """The model after a change: much shorter answers, many refusals, less sure."""
    reason = rng.choices(["STOP", "MAX_TOKENS", "SAFETY"], [0.6, 0.05, 0.35])[0]
    return answer(
        max(1, int(rng.gauss(40, 15))), reason, version=version, avg_logprob=rng.gauss(-0.9, 0.1)
    )


def settings(**changes: Any) -> DriftSettings:
    values: dict[str, Any] = {
        "reference_answers": 500,
        "recent_window_s": 600,
        "slices": 10,
        "min_answers": 100,
    }
    return DriftSettings(**{**values, **changes})


def feed(monitor: DriftMonitor, clock: Clock, answers: list[AnswerFacts], every_s: float) -> None:
    for facts in answers:
        monitor.observe("gemini-2.5-flash", facts)
        clock.now += every_s


def test_an_unchanged_model_stays_below_the_alert_threshold() -> None:
    rng, clock = random.Random(7), Clock()
    monitor = DriftMonitor(settings(), clock)

    feed(monitor, clock, [usual(rng) for _ in range(2000)], every_s=1.0)

    (report,) = monitor.reports()
    assert report.reference_fixed
    assert report.reference_answers == 500
    signals = report.drift["reference"]
    assert set(signals) == {"output_length", "finish_reason", "refusal"}
    assert max(signals.values()) < ALERT_THRESHOLD / 2
    assert abs(report.avg_logprob_shift["reference"]) < 0.05


def test_a_shifted_model_is_seen_on_every_signal() -> None:
    rng, clock = random.Random(11), Clock()
    monitor = DriftMonitor(settings(), clock)
    feed(monitor, clock, [usual(rng) for _ in range(600)], every_s=1.0)

    feed(monitor, clock, [shifted(rng) for _ in range(700)], every_s=1.0)

    (report,) = monitor.reports()
    signals = report.drift["reference"]
    assert signals["output_length"] > 0.5
    assert signals["finish_reason"] > ALERT_THRESHOLD
    assert signals["refusal"] > ALERT_THRESHOLD
    assert report.refusal_ratio["recent"] > 0.25 > report.refusal_ratio["reference"]
    assert report.avg_logprob_shift["reference"] == pytest.approx(-0.6, abs=0.05)


def test_the_recent_window_slides_back_once_the_shift_is_over() -> None:
    rng, clock = random.Random(3), Clock()
    monitor = DriftMonitor(settings(), clock)
    feed(monitor, clock, [usual(rng) for _ in range(600)], every_s=1.0)
    feed(monitor, clock, [shifted(rng) for _ in range(300)], every_s=1.0)
    assert monitor.reports()[0].drift["reference"]["output_length"] > ALERT_THRESHOLD

    # Longer than the window: the shifted answers have all slid out.
    feed(monitor, clock, [usual(rng) for _ in range(700)], every_s=1.0)

    assert max(monitor.reports()[0].drift["reference"].values()) < ALERT_THRESHOLD / 2


def test_nothing_is_shown_before_both_windows_hold_enough_answers() -> None:
    rng, clock = random.Random(5), Clock()
    monitor = DriftMonitor(settings(), clock)

    feed(monitor, clock, [usual(rng) for _ in range(80)], every_s=1.0)

    (report,) = monitor.reports()
    assert not report.reference_fixed
    assert report.drift == {}
    # A quiet window after the reference: the recent one empties, and no divergence shows.
    feed(monitor, clock, [usual(rng) for _ in range(500)], every_s=1.0)
    clock.now += 3600
    (report,) = monitor.reports()
    assert report.reference_fixed
    assert report.recent_answers == 0
    assert report.drift == {}


def test_a_reference_period_fixes_the_reference_before_it_is_full() -> None:
    rng, clock = random.Random(5), Clock()
    monitor = DriftMonitor(settings(reference_answers=10_000, reference_period_s=300), clock)

    feed(monitor, clock, [usual(rng) for _ in range(400)], every_s=1.0)

    (report,) = monitor.reports()
    assert report.reference_fixed
    assert report.reference_answers == 300  # the answers of its first 300 seconds


def test_a_new_model_version_gets_its_own_reference_and_is_compared_with_the_last() -> None:
    rng, clock = random.Random(13), Clock()
    monitor = DriftMonitor(settings(), clock)
    feed(monitor, clock, [usual(rng, "v1") for _ in range(600)], every_s=1.0)

    feed(monitor, clock, [shifted(rng, "v2") for _ in range(600)], every_s=1.0)

    reports = {report.model_version: report for report in monitor.reports()}
    new = reports["v2"]
    assert new.previous_version == "v1"
    # Against its own reference, v2 is steady; against v1's, it has moved.
    assert max(new.drift["reference"].values()) < ALERT_THRESHOLD / 2
    assert new.drift["previous_version"]["output_length"] > 0.5
    assert new.avg_logprob_shift["previous_version"] < -0.5


def test_reset_mode_forgets_the_previous_version() -> None:
    rng, clock = random.Random(13), Clock()
    monitor = DriftMonitor(settings(on_version_change="reset"), clock)
    feed(monitor, clock, [usual(rng, "v1") for _ in range(600)], every_s=1.0)

    feed(monitor, clock, [shifted(rng, "v2") for _ in range(600)], every_s=1.0)

    (report,) = monitor.reports()
    assert report.model_version == "v2"
    assert report.previous_version is None
    assert "previous_version" not in report.drift


def test_versions_beyond_max_series_drop_the_least_recently_answered() -> None:
    clock = Clock()
    monitor = DriftMonitor(settings(max_series=3), clock)

    for number in range(10):  # a client cannot grow the gauges without bound
        monitor.observe(f"model-{number}", answer(10, version="v"))
    monitor.observe("model-9", answer(10, version="v"))

    assert sorted(report.model for report in monitor.reports()) == [
        "model-7",
        "model-8",
        "model-9",
    ]


def test_the_gauges_carry_the_monitors_figures_through_metrics() -> None:
    rng, clock = random.Random(17), Clock()
    metrics = GatewayMetrics()
    stage = QualityStage(QualitySettings(drift=settings()), metrics, clock=clock)
    assert stage.drift is not None
    feed(stage.drift, clock, [usual(rng) for _ in range(600)], every_s=1.0)
    feed(stage.drift, clock, [shifted(rng) for _ in range(300)], every_s=1.0)

    text = metrics.render().decode()

    assert (
        'localgate_quality_window_answers{model="gemini-2.5-flash",'
        'model_version="gemini-2.5-flash-001",window="reference"} 500.0' in text
    )
    drift = [
        line
        for line in text.splitlines()
        if line.startswith("localgate_quality_drift{") and 'signal="output_length"' in line
    ]
    assert len(drift) == 1
    assert float(drift[0].rsplit(" ", 1)[1]) > ALERT_THRESHOLD
