"""Redaction: personal data found, replaced before it leaves, and put back in the answer."""

from localgate.redaction import native

# Before any detection module is imported: compiled, or the sources (native.py says why).
native.install()

from localgate.redaction.detector import Detector  # noqa: E402
from localgate.redaction.findings import Finding  # noqa: E402
from localgate.redaction.placeholders import Pseudonyms  # noqa: E402

__all__ = ["Detector", "Finding", "Pseudonyms"]
