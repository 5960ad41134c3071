"""Quality signals: low-confidence answers and drift (docs/quality.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from localgate.config.base import Section

__all__ = ["DriftSettings", "PromptDriftSettings", "QualitySettings"]


class PromptDriftSettings(Section):
    """How far recent prompts are from the reference prompts, per tenant (off by default:
    it embeds a sample of redacted prompts with the local embedder)."""

    enabled: bool = False
    # Only these tenants are watched, each a label value of its own: name them here.
    tenants: tuple[str, ...] = ()
    # The share of their requests whose redacted last turn is embedded.
    sample_rate: float = Field(0.05, gt=0, le=1)
    # The reference centroid is fixed after this many sampled prompts.
    reference_prompts: int = Field(200, ge=1)
    # Prompts waiting for the embedder beyond this are not sampled (bounded cost).
    max_pending: int = Field(64, ge=1)

    @field_validator("tenants", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _tenants_when_enabled(self) -> PromptDriftSettings:
        if self.enabled and not self.tenants:
            raise ValueError("enabled: name the tenants to watch in tenants")
        return self


class DriftSettings(Section):
    """Each model version's recent answers against its reference answers."""

    enabled: bool = True
    # The reference window of a model version: its first reference_answers answers, or
    # those of its first reference_period_s seconds (if set and min_answers came by then).
    reference_answers: int = Field(1000, ge=1)
    reference_period_s: float | None = Field(None, gt=0)
    # The recent window slides: the answers of the last recent_window_s seconds, kept in
    # ``slices`` tallies (it moves on by recent_window_s / slices at a time).
    recent_window_s: float = Field(3600.0, gt=0)
    slices: int = Field(12, ge=1, le=360)
    # A divergence is shown only when both windows hold at least this many answers.
    min_answers: int = Field(100, ge=1)
    # Model versions tracked at once; the least recently answered one is dropped beyond.
    max_series: int = Field(50, ge=1, le=1000)
    # compare: a new model version gets its own reference, and its recent answers are also
    # compared with the previous version's reference. reset: only its own reference.
    on_version_change: Literal["compare", "reset"] = "compare"
    # Fixed references are saved in <data_dir>/quality-drift.json (every few minutes and at
    # shutdown) and taken up again at start, so a restart does not start them over.
    persist: bool = True
    prompts: PromptDriftSettings = PromptDriftSettings()

    @model_validator(mode="after")
    def _reference_can_fill(self) -> DriftSettings:
        if self.min_answers > self.reference_answers:
            raise ValueError("min_answers: must not exceed reference_answers")
        return self


class QualitySettings(Section):
    """Confidence threshold and drift; ``routes[].min_avg_logprob`` overrides the
    threshold, and ``routes[].retry_low_confidence_on`` names a stronger model."""

    # An answer whose average log-probability per output token is below this is marked
    # low confidence (x-localgate-confidence: low, metric, audit field). None: never.
    min_avg_logprob: float | None = Field(None, le=0)
    drift: DriftSettings = DriftSettings()
