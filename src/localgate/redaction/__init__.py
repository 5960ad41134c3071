"""Redaction: personal data found, replaced before it leaves, and put back in the answer."""

from localgate.redaction.detector import Detector
from localgate.redaction.findings import Finding
from localgate.redaction.placeholders import Pseudonyms

__all__ = ["Detector", "Finding", "Pseudonyms"]
