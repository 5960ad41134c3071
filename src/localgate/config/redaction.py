"""Redaction: what happens to each type of personal data before a request leaves."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from localgate.config.base import Section

__all__ = [
    "BUILTIN_TYPES",
    "Action",
    "MaskSettings",
    "ProxySettings",
    "RedactionRule",
    "RedactionSettings",
    "TenantRedactionSettings",
]

Action = Literal["pseudonymize", "mask", "block", "allow"]
BUILTIN_TYPES = (
    "CN_MOBILE", "CN_LANDLINE", "CN_RESIDENT_ID", "CN_BANK_CARD", "CN_USCC", "CN_PASSPORT",
    "CN_TRAVEL_PERMIT", "HK_ID", "TW_ID", "CN_LICENSE_PLATE", "EMAIL", "IPV4", "IPV6",
    "CREDIT_CARD", "US_SSN", "IBAN", "API_SECRET", "PERSON", "CN_ADDRESS",
)  # fmt: skip
_TYPE_NAME = r"^[A-Z][A-Z0-9_]*$"


class RedactionRule(Section):
    """A custom redaction rule: an RE2 pattern, the type it reports, what to do with it."""

    pattern: str = Field(min_length=1)
    type: str = Field("CUSTOM", pattern=_TYPE_NAME)
    action: Action = "mask"
    replacement: str | None = None
    validator: Literal["luhn", "cn_resident_id", "uscc", "iban", "ipv4"] | None = None

    @field_validator("pattern")
    @classmethod
    def _linear_time(cls, value: str) -> str:
        # Imported when a rule is read: RE2 is not needed to start the CLI.
        from localgate.patterns import compile_pattern

        compile_pattern(value)
        return value


class MaskSettings(Section):
    """How ``mask`` replaces a value: a fixed text, or keep a few characters at each end."""

    replacement: str = "[REDACTED]"
    keep_start: int = Field(0, ge=0)
    keep_end: int = Field(0, ge=0)
    fill: str = Field("*", min_length=1, max_length=1)


class RedactionSettings(Section):
    """What happens to each type of personal data before a request leaves."""

    enabled: bool = True
    default_action: Action = "pseudonymize"
    actions: dict[str, Action] = Field(default_factory=dict)
    mask: MaskSettings = MaskSettings()
    binary_data: Literal["block", "allow"] = "block"
    detect_names: bool = True
    min_score: float = Field(0.5, gt=0, le=1)
    scan_answers: bool = False
    foreign_signatures: Literal["refuse", "drop"] = "refuse"


class TenantRedactionSettings(Section):
    """A tenant's changes to the global redaction settings; unset fields inherit."""

    enabled: bool | None = None
    default_action: Action | None = None
    actions: dict[str, Action] = Field(default_factory=dict)
    mask: MaskSettings | None = None
    binary_data: Literal["block", "allow"] | None = None
    detect_names: bool | None = None
    min_score: float | None = Field(None, gt=0, le=1)
    scan_answers: bool | None = None
    foreign_signatures: Literal["refuse", "drop"] | None = None


class ProxySettings(Section):
    """Data-localization policy of the proxy."""

    enable_audit: bool = True
    redaction: RedactionSettings = RedactionSettings()
    redaction_rules: tuple[RedactionRule, ...] = ()
    signature_key_file: Path | None = None
