"""Drift per model and model version: each version's recent window against its own
reference, and (``on_version_change: compare``) against the previous version's.

Answers are counted as requests end; the divergences are computed only when read (a
scrape of /metrics), from a few tallies per version: nothing per answer but counting.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from localgate.config import DriftSettings
from localgate.observability.quality import Reading
from localgate.quality.answers import AnswerFacts
from localgate.quality.divergence import js_divergence
from localgate.quality.windows import Reference, SlidingWindow, Tally

__all__ = ["DriftMonitor", "SeriesReport"]

logger = logging.getLogger("localgate.quality")
# The saved state's format: the bins are checked too, so a change of bins discards it.
_FORMAT = 1


@dataclass(slots=True)
class _Series:
    reference: Reference
    recent: SlidingWindow
    # The reference of the version this one followed (compare mode), fixed when copied.
    previous: Tally | None = None
    previous_version: str | None = None


@dataclass(frozen=True, slots=True)
class SeriesReport:
    """The picture of one model version, as the report and the gauges show it."""

    model: str
    model_version: str
    reference_answers: int
    reference_fixed: bool
    recent_answers: int
    refusal_ratio: dict[str, float] = field(default_factory=dict)  # by window
    avg_logprob: dict[str, float] = field(default_factory=dict)  # by window
    # {against: {signal: divergence}}, against "reference" or "previous_version"
    drift: dict[str, dict[str, float]] = field(default_factory=dict)
    avg_logprob_shift: dict[str, float] = field(default_factory=dict)  # by against
    previous_version: str | None = None


class DriftMonitor:
    """Tallies answers per (model, model version) and compares their windows."""

    def __init__(self, settings: DriftSettings, clock: Callable[[], float]) -> None:
        self._settings = settings
        self._clock = clock
        # Least recently answered first: the one dropped past max_series.
        self._series: OrderedDict[tuple[str, str], _Series] = OrderedDict()
        self._latest: dict[str, str] = {}

    def observe(self, model: str, facts: AnswerFacts) -> None:
        """Count one answer of ``model`` (its version is the answer's modelVersion)."""
        now = self._clock()
        version = facts.model_version or ""
        key = (model, version)
        series = self._series.get(key)
        if series is None:
            series = self._start(model, version)
        else:
            self._series.move_to_end(key)
        series.reference.add(facts, now)
        series.recent.add(facts, now)

    def _start(self, model: str, version: str) -> _Series:
        settings = self._settings
        series = _Series(
            Reference(
                settings.reference_answers, settings.reference_period_s, settings.min_answers
            ),
            SlidingWindow(settings.recent_window_s, settings.slices),
        )
        before = self._latest.get(model)
        if before is not None:
            logger.info("model %s answers as version %r now (was %r)", model, version, before)
            previous = self._series.get((model, before))
            if settings.on_version_change == "reset":
                self._series.pop((model, before), None)
            elif previous is not None and previous.reference.tally.answers >= settings.min_answers:
                series.previous = previous.reference.tally
                series.previous_version = before
        self._latest[model] = version
        self._series[(model, version)] = series
        while len(self._series) > settings.max_series:
            (old_model, old_version), _ = self._series.popitem(last=False)
            if self._latest.get(old_model) == old_version:
                del self._latest[old_model]
        return series

    def saved(self) -> dict[str, Any]:
        """What outlives a restart: the fixed references (and the previous versions' they
        are compared with), and each model's latest version. Recent windows and references
        still filling start again."""
        series = []
        for (model, version), entry in list(self._series.items()):
            if not entry.reference.fixed:
                continue
            series.append(
                {
                    "model": model,
                    "model_version": version,
                    "reference": entry.reference.tally.to_json(),
                    "previous_version": entry.previous_version,
                    "previous": entry.previous.to_json() if entry.previous else None,
                }
            )
        return {"format": _FORMAT, "series": series, "latest": dict(self._latest)}

    def restore(self, saved: Any) -> int:
        """Take up the references of ``saved`` (from ``saved()``); how many. ``ValueError``
        if it is not such a state."""
        if not isinstance(saved, dict) or saved.get("format") != _FORMAT:
            raise ValueError("not a saved drift state of this version")
        restored: list[tuple[tuple[str, str], _Series]] = []
        settings = self._settings
        for entry in saved.get("series") or ():
            if not isinstance(entry, dict):
                raise ValueError("a series is an object")
            model, version = entry.get("model"), entry.get("model_version")
            before = entry.get("previous_version")
            if not isinstance(model, str) or not isinstance(version, str):
                raise ValueError("a series names its model and version")
            previous = entry.get("previous")
            restored.append(
                (
                    (model, version),
                    _Series(
                        Reference.fixed_at(Tally.from_json(entry.get("reference"))),
                        SlidingWindow(settings.recent_window_s, settings.slices),
                        Tally.from_json(previous) if previous is not None else None,
                        before if isinstance(before, str) and previous is not None else None,
                    ),
                )
            )
        latest = saved.get("latest") or {}
        if not isinstance(latest, dict):
            raise ValueError("latest is an object")
        for key, series in restored[-settings.max_series :]:
            self._series[key] = series
        self._latest.update(
            {
                model: version
                for model, version in latest.items()
                if (model, version) in self._series
            }
        )
        return min(len(restored), settings.max_series)

    def reports(self) -> list[SeriesReport]:
        """Every tracked model version's windows and divergences, now."""
        now = self._clock()
        minimum = self._settings.min_answers
        found = []
        for (model, version), series in list(self._series.items()):
            fixed = series.reference.settle(now)
            reference = series.reference.tally
            recent = series.recent.total(now)
            windows = {"reference": reference, "recent": recent}
            drift: dict[str, dict[str, float]] = {}
            shift: dict[str, float] = {}
            against = {
                "reference": reference if fixed else None,
                "previous_version": series.previous,
            }
            for name, base in against.items():
                if base is None or base.answers < minimum or recent.answers < minimum:
                    continue
                drift[name] = _divergences(base, recent)
                if base.avg_logprob is not None and recent.avg_logprob is not None:
                    shift[name] = recent.avg_logprob - base.avg_logprob
            found.append(
                SeriesReport(
                    model=model,
                    model_version=version,
                    reference_answers=reference.answers,
                    reference_fixed=fixed,
                    recent_answers=recent.answers,
                    refusal_ratio={
                        name: tally.refusal_ratio
                        for name, tally in windows.items()
                        if tally.answers
                    },
                    avg_logprob={
                        name: value
                        for name, tally in windows.items()
                        if (value := tally.avg_logprob) is not None
                    },
                    drift=drift,
                    avg_logprob_shift=shift,
                    previous_version=series.previous_version,
                )
            )
        return found

    def readings(self) -> list[Reading]:
        """The drift gauges' samples."""
        samples: list[Reading] = []
        for report in self.reports():
            series = (report.model, report.model_version)
            samples.append(
                (
                    "localgate_quality_window_answers",
                    (*series, "reference"),
                    report.reference_answers,
                )
            )
            samples.append(
                ("localgate_quality_window_answers", (*series, "recent"), report.recent_answers)
            )
            for window, ratio in report.refusal_ratio.items():
                samples.append(("localgate_quality_refusal_ratio", (*series, window), ratio))
            for window, value in report.avg_logprob.items():
                samples.append(("localgate_quality_avg_logprob", (*series, window), value))
            for against, signals in report.drift.items():
                for signal, value in signals.items():
                    samples.append(("localgate_quality_drift", (*series, signal, against), value))
            for against, value in report.avg_logprob_shift.items():
                samples.append(("localgate_quality_avg_logprob_shift", (*series, against), value))
        return samples


def _divergences(base: Tally, recent: Tally) -> dict[str, float]:
    return {
        "output_length": js_divergence(base.lengths, recent.lengths),
        "finish_reason": js_divergence(base.finishes, recent.finishes),
        "refusal": js_divergence(
            (base.answers - base.refusals, base.refusals),
            (recent.answers - recent.refusals, recent.refusals),
        ),
    }
