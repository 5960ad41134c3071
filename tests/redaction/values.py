"""Generators of valid identifiers (correct check digits), for tests and properties."""

from __future__ import annotations

import string

from hypothesis import strategies as st

DIGITS = string.digits


def resident_id_check(body: str) -> str:
    weights = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
    return "10X98765432"[sum(int(d) * w for d, w in zip(body, weights, strict=True)) % 11]


def luhn_complete(body: str) -> str:
    """``body`` plus the Luhn check digit."""
    total = 0
    for index, char in enumerate(reversed(body)):
        digit = int(char)
        if index % 2 == 0:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return body + str((10 - total % 10) % 10)


@st.composite
def resident_ids(draw: st.DrawFn) -> str:
    region = draw(st.sampled_from(["110105", "310104", "440305", "510107", "330106"]))
    year = draw(st.integers(1950, 2005))
    month = draw(st.integers(1, 12))
    day = draw(st.integers(1, 28))
    sequence = draw(st.text(DIGITS, min_size=3, max_size=3))
    body = f"{region}{year}{month:02d}{day:02d}{sequence}"
    return body + resident_id_check(body)


@st.composite
def mobiles(draw: st.DrawFn) -> str:
    prefix = draw(st.sampled_from(["138", "139", "150", "186", "199", "177", "166"]))
    rest = draw(st.text(DIGITS, min_size=8, max_size=8))
    style = draw(st.sampled_from(["plain", "dash", "space", "+86"]))
    if style == "dash":
        return f"{prefix}-{rest[:4]}-{rest[4:]}"
    if style == "space":
        return f"{prefix} {rest[:4]} {rest[4:]}"
    if style == "+86":
        return f"+86 {prefix}{rest}"
    return prefix + rest


@st.composite
def unionpay_cards(draw: st.DrawFn) -> str:
    length = draw(st.sampled_from([16, 19]))
    body = "62" + draw(st.text(DIGITS, min_size=length - 3, max_size=length - 3))
    return luhn_complete(body)


@st.composite
def visa_cards(draw: st.DrawFn) -> str:
    return luhn_complete("4" + draw(st.text(DIGITS, min_size=14, max_size=14)))


_USCC = "0123456789ABCDEFGHJKLMNPQRTUWXY"


@st.composite
def credit_codes(draw: st.DrawFn) -> str:
    org_body = draw(st.text(DIGITS + "ABCDEFGHJKLMNPQRTUWXY", min_size=8, max_size=8))
    # GB 11714: letters count by their place in the Latin alphabet (A=10 ... Z=35).
    org_total = sum(
        int(c, 36) * w for c, w in zip(org_body, (3, 7, 9, 10, 5, 8, 4, 2), strict=True)
    )
    check = 11 - org_total % 11
    org = org_body + ("X" if check == 10 else "0" if check == 11 else str(check))
    body = (
        draw(st.sampled_from(["91", "92", "12", "52"]))
        + draw(st.text(DIGITS, min_size=6, max_size=6))
        + org
    )
    weights = (1, 3, 9, 27, 19, 26, 16, 17, 20, 29, 25, 13, 8, 24, 10, 30, 28)
    total = sum(_USCC.index(c) * w for c, w in zip(body, weights, strict=True))
    return body + _USCC[(31 - total % 31) % 31]


@st.composite
def emails(draw: st.DrawFn) -> str:
    local = draw(st.text(string.ascii_lowercase + DIGITS + "._", min_size=1, max_size=12))
    local = "a" + local.strip("._") if local.strip("._") else "user"
    domain = draw(st.sampled_from(["example.com", "qq.com", "corp.example.cn", "mail.co.uk"]))
    return f"{local}@{domain}"


@st.composite
def ibans(draw: st.DrawFn) -> str:
    bank = draw(st.text(string.ascii_uppercase, min_size=4, max_size=4))
    account = draw(st.text(DIGITS, min_size=14, max_size=14))
    rearranged = bank + account + "GB00"
    number = int("".join(str(int(c, 36)) for c in rearranged))
    return f"GB{98 - number % 97:02d}{bank}{account}"


@st.composite
def aws_keys(draw: st.DrawFn) -> str:
    return "AKIA" + draw(st.text(string.ascii_uppercase + DIGITS, min_size=16, max_size=16))


@st.composite
def ipv4s(draw: st.DrawFn) -> str:
    return ".".join(str(draw(st.integers(1, 254))) for _ in range(4))


VALUES = {
    "CN_RESIDENT_ID": resident_ids(),
    "CN_MOBILE": mobiles(),
    "CN_BANK_CARD": unionpay_cards(),
    "CREDIT_CARD": visa_cards(),
    "CN_USCC": credit_codes(),
    "EMAIL": emails(),
    "IBAN": ibans(),
    "API_SECRET": aws_keys(),
    "IPV4": ipv4s(),
}
