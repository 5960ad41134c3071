"""Custom redaction rules from the configuration, compiled with RE2.

RE2 runs in time linear in the input whatever the pattern, so a tenant's rule can
never hang the gateway (no backreferences or look-arounds: RE2 refuses them, and the
configuration check reports the rule that uses one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import re2

from localgate.redaction import validators
from localgate.redaction.findings import Finding
from localgate.redaction.recognizers import Scan

__all__ = ["VALIDATORS", "CustomRecognizer", "compile_pattern"]

VALIDATORS: dict[str, Callable[[str], bool]] = {
    "luhn": validators.luhn,
    "cn_resident_id": validators.cn_resident_id,
    "uscc": validators.uscc,
    "iban": validators.iban,
    "ipv4": validators.ipv4,
}


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False
    return options


def compile_pattern(pattern: str) -> Any:
    """Compile with RE2; raise ``ValueError`` saying why the pattern is not accepted."""
    try:
        return re2.compile(pattern, options=_options())
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"not a valid RE2 pattern: {reason}") from exc


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
