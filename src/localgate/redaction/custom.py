"""Custom redaction rules from the configuration (patterns compiled by ``localgate.patterns``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from localgate.redaction import validators
from localgate.redaction.findings import Finding
from localgate.redaction.recognizers import Scan

__all__ = ["VALIDATORS", "CustomRecognizer"]

VALIDATORS: dict[str, Callable[[str], bool]] = {
    "luhn": validators.luhn,
    "cn_resident_id": validators.cn_resident_id,
    "uscc": validators.uscc,
    "iban": validators.iban,
    "ipv4": validators.ipv4,
}


@dataclass(frozen=True, slots=True)
class CustomRecognizer:
    """One configured rule: an RE2 pattern, an optional validator, the type it reports."""

    type: str
    pattern: Any
    validate: Callable[[str], bool] | None = None

    def find(self, scan: Scan) -> Iterator[Finding]:
        """Findings of this rule; a configured rule outranks the built-in recognizers."""
        for match in self.pattern.finditer(scan.folded):
            if match.end() == match.start():
                continue
            if self.validate is not None and not self.validate(match.group()):
                continue
            yield Finding(match.start(), match.end(), self.type, 1.0)
