"""Built-in recognizers for identifiers that have a recognisable shape.

Every pattern uses explicit look-arounds instead of ``\\b`` (Python treats CJK
characters as word characters, so ``\\b`` never fires between ``号`` and ``1``), and
refuses a match that touches another digit or letter, so phone numbers do not match
inside order numbers. Types without a checksum need a context word nearby.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from localgate.redaction import validators
from localgate.redaction.findings import Finding

__all__ = ["PatternRecognizer", "builtin_recognizers"]

# How far before (and after) a match a context word is looked for, in characters.
_CONTEXT_WINDOW = 24
_B = r"(?<![0-9A-Za-z])"  # nothing alphanumeric just before
_E = r"(?![0-9A-Za-z])"  # nothing alphanumeric just after


@dataclass(frozen=True, slots=True)
class PatternRecognizer:
    """A regular expression, an optional validator and context words for one type."""

    type: str
    pattern: re.Pattern[str]
    validate: Callable[[str], bool] | None = None
    score: float = 0.85
    context: tuple[str, ...] = ()
    requires_context: bool = False

    def find(self, folded: str) -> Iterator[Finding]:
        """Findings of this type in width-folded text."""
        lowered: str | None = None
        for match in self.pattern.finditer(folded):
            value = match.group()
            if self.validate is not None and not self.validate(value):
                continue
            score = self.score
            if self.context:
                if lowered is None:
                    lowered = folded.lower()
                near = _has_context(lowered, match.start(), match.end(), self.context)
                if self.requires_context and not near:
                    continue
                if near:
                    score = max(score, 0.95)
            yield Finding(match.start(), match.end(), self.type, score)


def _has_context(lowered: str, start: int, end: int, words: tuple[str, ...]) -> bool:
    before = lowered[max(0, start - _CONTEXT_WINDOW) : start]
    after = lowered[end : end + 8]
    return any(word in before or word in after for word in words)


_MOBILE_PREFIXES = re.compile(r"1(?:3\d|4[5-9]|5[0-35-9]|6[2567]|7[0-8]|8\d|9[0-35-9])")


def _mobile(value: str) -> bool:
    digits = validators.digits_of(value)
    return _MOBILE_PREFIXES.match(digits[-11:]) is not None


def _bank_card(value: str) -> bool:
    return validators.luhn(value) and validators.credit_card_issuer(value) == "unionpay"


def _bank_card_by_context(value: str) -> bool:
    # Domestic debit cards outside the 62 range, or old cards that fail Luhn: only with
    # a context word (required below).
    return 16 <= len(validators.digits_of(value)) <= 19


def _credit_card(value: str) -> bool:
    issuer = validators.credit_card_issuer(value)
    return validators.luhn(value) and issuer is not None and issuer != "unionpay"


def _plate(value: str) -> bool:
    return any(char.isdigit() for char in value)


def _secret(value: str) -> bool:
    if value.startswith("eyJ"):
        return validators.jwt(value)
    if value.startswith("sk-"):
        tail = value.split("-")[-1]
        return any(c.isdigit() for c in tail) and any(c.isalpha() for c in tail)
    return True


_CARD_CONTEXT = ("卡号", "银行卡", "信用卡", "借记卡", "储蓄卡", "card", "账号", "帐号")
_ID_CONTEXT = ("身份证", "证件号", "公民身份", "id card", "id no", "identity")
_PHONE_CONTEXT = ("电话", "座机", "固话", "手机", "联系方式", "tel", "phone", "fax", "传真")
_PASSPORT_CONTEXT = ("护照", "passport")
_PERMIT_CONTEXT = ("通行证", "回乡证", "台胞证", "往来", "permit")

_CARD_SHAPES = (
    r"\d{13,19}"  # contiguous
    r"|\d{4}(?:[- ]\d{4}){2,3}(?:[- ]\d{1,4})?"  # groups of four
    r"|\d{4}[- ]\d{6}[- ]\d{4,5}"  # Amex / Diners 4-6-5
)


def builtin_recognizers() -> tuple[PatternRecognizer, ...]:
    """Every built-in pattern recognizer, compiled."""
    c = re.compile
    return (
        PatternRecognizer(
            "CN_MOBILE",
            c(
                _B
                + r"(?<!\+)(?:(?:\+|00)86[- ]?|86[- ])?1[3-9]\d[- ]?\d{4}[- ]?\d{4}"
                + _E
                + r"(?!\.\d)"
            ),
            _mobile,
            score=0.85,
            context=_PHONE_CONTEXT,
        ),
        PatternRecognizer(
            "CN_LANDLINE",
            c(
                _B + r"(?:\(0(?:10|2\d|[3-9]\d{2})\)[- ]?|0(?:10|2\d|[3-9]\d{2})[- ]"
                r"|(?:\+|00)86[- ]?(?:10|2\d|[3-9]\d{2})[- ]?)[2-9]\d{6,7}(?:-\d{1,5})?" + _E
            ),
            score=0.8,
            context=_PHONE_CONTEXT,
        ),
        PatternRecognizer(
            "CN_LANDLINE",
            c(_B + r"0(?:10|2\d|[3-9]\d{2})[2-9]\d{6,7}" + _E),
            context=_PHONE_CONTEXT,
            requires_context=True,
        ),
        PatternRecognizer(
            "CN_RESIDENT_ID",
            c(_B + r"\d{17}[\dXx]" + _E),
            validators.cn_resident_id,
            score=0.95,
            context=_ID_CONTEXT,
        ),
        PatternRecognizer(
            "CN_RESIDENT_ID",
            c(_B + r"\d{15}" + _E),
            validators.cn_resident_id_15,
            context=_ID_CONTEXT,
            requires_context=True,
        ),
        PatternRecognizer(
            "CN_BANK_CARD",
            c(_B + r"(?:" + _CARD_SHAPES + r")" + _E + r"(?!\.\d)"),
            _bank_card,
            score=0.9,
            context=_CARD_CONTEXT,
        ),
        PatternRecognizer(
            "CN_BANK_CARD",
            c(_B + r"(?:" + _CARD_SHAPES + r")" + _E + r"(?!\.\d)"),
            _bank_card_by_context,
            score=0.6,
            context=_CARD_CONTEXT[:5],
            requires_context=True,
        ),
        PatternRecognizer(
            "CREDIT_CARD",
            c(_B + r"(?:" + _CARD_SHAPES + r")" + _E + r"(?!\.\d)"),
            _credit_card,
            score=0.9,
            context=_CARD_CONTEXT,
        ),
        PatternRecognizer(
            "CN_USCC",
            c(_B + r"[0-9A-HJ-NPQRTUWXY]{2}\d{6}[0-9A-HJ-NPQRTUWXY]{10}" + _E),
            validators.uscc,
            score=0.95,
            context=("统一社会信用代码", "信用代码", "税号", "credit code"),
        ),
        PatternRecognizer(
            "CN_PASSPORT",
            c(_B + r"E(?:\d{8}|[A-HJ-NP-Z]\d{7})" + _E),
            score=0.7,
            context=_PASSPORT_CONTEXT,
        ),
        PatternRecognizer(
            "CN_PASSPORT",
            c(_B + r"[GDSP]\d{7,8}" + _E),
            context=_PASSPORT_CONTEXT,
            requires_context=True,
        ),
        PatternRecognizer(
            "CN_TRAVEL_PERMIT",
            c(_B + r"(?:[HM]\d{8}(?:\d{2})?|C[A-Z0-9]\d{7}|\d{8})" + _E),
            context=_PERMIT_CONTEXT,
            requires_context=True,
        ),
        PatternRecognizer(
            "HK_ID",
            c(_B + r"[A-Z]{1,2}\d{6}(?:\([0-9A]\)|[0-9A])" + _E),
            validators.hk_id,
            score=0.85,
            context=("香港身份证", "hkid", "身份证"),
        ),
        PatternRecognizer(
            "TW_ID",
            c(_B + r"[A-Z][12]\d{8}" + _E),
            validators.taiwan_id,
            score=0.85,
            context=("身分證", "身份证", "台湾"),
        ),
        PatternRecognizer(
            "CN_LICENSE_PLATE",
            c(
                r"[京津沪渝冀豫云辽黑湘皖鲁新苏浙赣鄂桂甘晋蒙陕吉闽贵粤青藏川宁琼]"
                r"[A-HJ-NP-Z][·• ]?(?:[DF][A-HJ-NP-Z0-9]\d{4}|\d{5}[DF]"
                r"|[A-HJ-NP-Z0-9]{4}[A-HJ-NP-Z0-9挂学警港澳])" + _E
            ),
            _plate,
            score=0.85,
            context=("车牌", "牌照", "号牌", "plate"),
        ),
        PatternRecognizer(
            "EMAIL",
            c(
                r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
                r"\.[A-Za-z]{2,24}(?![A-Za-z0-9-])"
            ),
            score=0.95,
        ),
        PatternRecognizer(
            "IPV4",
            c(r"(?<![0-9.])(?<![vV])(?:\d{1,3}\.){3}\d{1,3}(?![0-9]|\.\d)"),
            validators.ipv4,
            score=0.8,
        ),
        PatternRecognizer(
            "IPV6",
            c(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![0-9A-Fa-f:])"),
            validators.ipv6,
            score=0.8,
        ),
        PatternRecognizer(
            "US_SSN",
            c(_B + r"(?<!-)\d{3}-\d{2}-\d{4}(?!-)" + _E),
            validators.us_ssn,
            score=0.7,
            context=("ssn", "social security"),
        ),
        PatternRecognizer(
            "IBAN",
            c(_B + r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?" + _E),
            validators.iban,
            score=0.95,
        ),
        PatternRecognizer(
            "API_SECRET",
            c(
                r"(?<![A-Za-z0-9_-])(?:"
                r"(?:AKIA|ASIA)[A-Z0-9]{16}"
                r"|AIza[0-9A-Za-z_-]{35}"
                r"|sk-(?:proj-|ant-(?:api\d\d-)?)?[A-Za-z0-9_-]{20,}"
                r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,}"
                r"|xox[abposr]-[A-Za-z0-9-]{10,}"
                r"|eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}"
                r")(?![A-Za-z0-9_-])"
                r"|-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*"
                r"PRIVATE KEY-----"
            ),
            _secret,
            score=0.95,
        ),
    )
