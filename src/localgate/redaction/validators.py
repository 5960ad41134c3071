"""Checksums and format rules that separate real identifiers from look-alikes.

Each function takes the matched text (already width-folded) and answers whether it
is a plausible value of its type. Sources: GB 11643-1999 (resident ID), GB 32100-2015
and GB 11714 (social credit code), ISO 7812 (Luhn), ISO 13616 (IBAN), the SSA's SSN
rules, the Hong Kong and Taiwan ID check digits.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
from datetime import date
from operator import mul

__all__ = [
    "cn_resident_id",
    "cn_resident_id_15",
    "credit_card_issuer",
    "digits_of",
    "hk_id",
    "iban",
    "ipv4",
    "ipv6",
    "jwt",
    "luhn",
    "taiwan_id",
    "us_ssn",
    "uscc",
]

# First two digits of a region code: provinces, plus 71 (Taiwan), 81-83 (HK/Macau/Taiwan
# residence permits).
_PROVINCES = frozenset(
    {11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46}
    | {50, 51, 52, 53, 54, 61, 62, 63, 64, 65, 71, 81, 82, 83}
)
_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"
_EARLIEST_BIRTH = date(1800, 1, 1)


def digits_of(text: str) -> str:
    """Only the digits of ``text`` (drops spaces, dashes, prefixes' plus signs)."""
    if text.isdecimal():
        return text
    return "".join(filter(str.isdecimal, text))


def _valid_date(year: int, month: int, day: int) -> bool:
    try:
        born = date(year, month, day)
    except ValueError:
        return False
    return _EARLIEST_BIRTH <= born <= date.today()


def cn_resident_id(value: str) -> bool:
    """18-character resident ID: region, real birth date, GB 11643 check character."""
    if len(value) != 18 or not value[:17].isdecimal():
        return False
    if int(value[:2]) not in _PROVINCES:
        return False
    if value.isascii():
        # Each ASCII digit's code is 48 + its value: the weighted sum without a Python
        # loop. The check character first: it rules out ten in eleven look-alikes, and
        # the birth date (which asks the clock) is then worked out for few.
        total = sum(map(mul, value[:17].encode(), _ID_WEIGHTS)) - 48 * sum(_ID_WEIGHTS)
        if _ID_CHECK[total % 11] != value[17].upper():
            return False
        return _valid_date(int(value[6:10]), int(value[10:12]), int(value[12:14]))
    if not _valid_date(int(value[6:10]), int(value[10:12]), int(value[12:14])):
        return False
    total = sum(int(digit) * weight for digit, weight in zip(value[:17], _ID_WEIGHTS, strict=True))
    return _ID_CHECK[total % 11] == value[17].upper()


def cn_resident_id_15(value: str) -> bool:
    """The old 15-digit resident ID: region and a real 19YY birth date (no check digit)."""
    if len(value) != 15 or not value.isdecimal() or int(value[:2]) not in _PROVINCES:
        return False
    return _valid_date(1900 + int(value[6:8]), int(value[8:10]), int(value[10:12]))


# A digit doubled by Luhn, digits summed: 0 2 4 6 8 1 3 5 7 9.
_LUHN_DOUBLED = str.maketrans("0123456789", "0246813579")


def luhn(value: str) -> bool:
    """ISO 7812 Luhn check over the digits of ``value``."""
    digits = digits_of(value)
    if len(digits) < 12:
        return False
    if digits.isascii():
        # Summing the code units of the ASCII digits is the same sum without a Python
        # loop (each is 48 + its value).
        kept, doubled = digits[-1::-2], digits[-2::-2].translate(_LUHN_DOUBLED)
        return (sum(kept.encode()) + sum(doubled.encode()) - 48 * len(digits)) % 10 == 0
    total = 0
    for index, char in enumerate(reversed(digits)):
        digit = int(char)
        if index % 2 == 1:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def credit_card_issuer(value: str) -> str | None:
    """The card scheme by its prefix and length, or None if no scheme fits."""
    digits = digits_of(value)
    length = len(digits)
    if digits.startswith("4") and length in (13, 16):
        return "visa"
    if length == 16 and (51 <= int(digits[:2]) <= 55 or 2221 <= int(digits[:4]) <= 2720):
        return "mastercard"
    if length == 15 and digits[:2] in ("34", "37"):
        return "amex"
    if length in (16, 19) and (digits.startswith(("6011", "65")) or 644 <= int(digits[:3]) <= 649):
        return "discover"
    if 16 <= length <= 19 and 3528 <= int(digits[:4]) <= 3589:
        return "jcb"
    if 16 <= length <= 19 and digits.startswith("62"):
        return "unionpay"
    return None


_USCC_ALPHABET = "0123456789ABCDEFGHJKLMNPQRTUWXY"
_USCC_WEIGHTS = (1, 3, 9, 27, 19, 26, 16, 17, 20, 29, 25, 13, 8, 24, 10, 30, 28)
_ORG_WEIGHTS = (3, 7, 9, 10, 5, 8, 4, 2)
_USCC_CHARACTERS = re.compile("[" + _USCC_ALPHABET + "]*")
_USCC_VALUES = str.maketrans({char: chr(value) for value, char in enumerate(_USCC_ALPHABET)})
_BASE_36 = {char: int(char, 36) for char in _USCC_ALPHABET}


def uscc(value: str) -> bool:
    """Unified social credit code: GB 32100 check character and GB 11714 organisation check."""
    value = value.upper()
    if len(value) != 18 or _USCC_CHARACTERS.fullmatch(value) is None:
        return False
    # Each character's value as a byte, for a weighted sum without a Python loop.
    total = sum(map(mul, value[:17].translate(_USCC_VALUES).encode("latin-1"), _USCC_WEIGHTS))
    if _USCC_ALPHABET[(31 - total % 31) % 31] != value[17]:
        return False
    org = value[8:17]
    # GB 11714 gives letters their place in the full Latin alphabet (A=10 ... Z=35),
    # unlike the USCC alphabet, which skips I, O, S, V and Z.
    org_total = sum(map(mul, map(_BASE_36.__getitem__, org[:8]), _ORG_WEIGHTS))
    check = 11 - org_total % 11
    expected = "X" if check == 10 else "0" if check == 11 else str(check)
    return org[8] == expected


def iban(value: str) -> bool:
    """ISO 13616: length 15-34 and mod 97 equal to 1 after moving the first four to the end."""
    compact = value.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34 or not (compact.isascii() and compact.isalnum()):
        return False
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(char, 36)) for char in rearranged)
    return int(number) % 97 == 1


def us_ssn(value: str) -> bool:
    """Area not 000/666/9xx, group not 00, serial not 0000."""
    digits = digits_of(value)
    if len(digits) != 9:
        return False
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def hk_id(value: str) -> bool:
    """Hong Kong identity card: one or two letters, six digits, check digit or A."""
    compact = value.replace("(", "").replace(")", "").upper()
    letters = compact[:-7]
    body, check = compact[-7:-1], compact[-1]
    if len(letters) not in (1, 2) or not letters.isalpha() or not body.isdecimal():
        return False
    values = [36] if len(letters) == 1 else []
    values += [ord(char) - 55 for char in letters] + [int(digit) for digit in body]
    total = sum(v * w for v, w in zip(values, range(9, 1, -1), strict=True))
    remainder = (11 - total % 11) % 11
    return check == ("A" if remainder == 10 else str(remainder))


_TAIWAN_LETTERS = {
    **{chr(ord("A") + i): 10 + i for i in range(8)},  # A-H = 10-17
    "J": 18, "K": 19, "L": 20, "M": 21, "N": 22, "P": 23, "Q": 24, "R": 25, "S": 26,
    "T": 27, "U": 28, "V": 29, "X": 30, "Y": 31, "W": 32, "Z": 33, "I": 34, "O": 35,
}  # fmt: skip


def taiwan_id(value: str) -> bool:
    """Taiwan national ID: letter, 1 or 2, eight digits; weighted sum mod 10 is 0."""
    value = value.upper()
    if len(value) != 10 or value[0] not in _TAIWAN_LETTERS or value[1] not in "12":
        return False
    if not value[1:].isdecimal():
        return False
    digits = [int(c) for c in f"{_TAIWAN_LETTERS[value[0]]}{value[1:]}"]
    weights = (1, 9, 8, 7, 6, 5, 4, 3, 2, 1, 1)
    return sum(d * w for d, w in zip(digits, weights, strict=True)) % 10 == 0


def ipv4(value: str) -> bool:
    """A dotted-quad IPv4 address (no leading zeros)."""
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


def ipv6(value: str) -> bool:
    """An IPv6 address with at least two groups of hex digits."""
    if sum(char in "0123456789abcdefABCDEF" for char in value) < 2:
        return False
    if "::" not in value and value.count(":") != 7 and not any(c in value for c in ".%/"):
        # Without "::", an IPv4 tail, a scope or a prefix, ipaddress wants exactly eight
        # groups; saying no here spares the exception (times like 12:30:45 get here).
        return False
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


def jwt(value: str) -> bool:
    """Three base64url parts whose first decodes to a JSON header naming ``alg``."""
    header = value.split(".", 1)[0]
    try:
        decoded = base64.urlsafe_b64decode(header + "=" * (-len(header) % 4))
        parsed = json.loads(decoded)
    except (binascii.Error, ValueError):
        return False
    return isinstance(parsed, dict) and "alg" in parsed
