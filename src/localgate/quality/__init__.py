"""Quality signals: low-confidence answers and drift per model version (docs/quality.md)."""

from localgate.quality.divergence import js_divergence
from localgate.quality.drift import DriftMonitor, SeriesReport
from localgate.quality.prompts import PromptDrift, PromptReport
from localgate.quality.stage import CONFIDENCE_HEADER, QualityStage

__all__ = [
    "CONFIDENCE_HEADER",
    "DriftMonitor",
    "PromptDrift",
    "PromptReport",
    "QualityStage",
    "SeriesReport",
    "js_divergence",
]
