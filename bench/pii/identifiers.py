"""Check digits, validators and generators of valid (and deliberately invalid) identifiers.

Written for the benchmark from the public standards, independently of
``localgate.redaction``: a detector is scored against values this module produces, so it
must not share code with the detector. Every generator takes a ``random.Random`` so the
corpus is reproducible. ``self_test()`` checks the published test vectors.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import random
import string

__all__ = [
    "cn_resident_id",
    "cn_resident_id_check",
    "hkid_check",
    "iban_check_digits",
    "iban_valid",
    "luhn_check_digit",
    "luhn_valid",
    "org_code_check",
    "resident_id_valid",
    "self_test",
    "twid_valid",
    "uscc_check",
    "uscc_valid",
]

# --- GB 11643-1999 resident identity number -------------------------------------------------

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"

# Real county-level region codes (GB/T 2260), one or more per province.
REGION_CODES = (
    "110101",  # 北京 东城
    "110105",  # 北京 朝阳
    "110108",  # 北京 海淀
    "120101",  # 天津 和平
    "130102",  # 石家庄 长安
    "140105",  # 太原 小店
    "150102",  # 呼和浩特 新城
    "210102",  # 沈阳 和平
    "220102",  # 长春 南关
    "230102",  # 哈尔滨 道里
    "310104",  # 上海 徐汇
    "310115",  # 上海 浦东
    "320102",  # 南京 玄武
    "320505",  # 苏州 虎丘
    "330106",  # 杭州 西湖
    "340104",  # 合肥 蜀山
    "350203",  # 厦门 思明
    "360102",  # 南昌 东湖
    "370202",  # 青岛 市南
    "410105",  # 郑州 金水
    "420106",  # 武汉 武昌
    "430104",  # 长沙 岳麓
    "440106",  # 广州 天河
    "440305",  # 深圳 南山
    "440524",  # 汕头 潮阳 (old code, still on cards)
    "450103",  # 南宁 青秀
    "460105",  # 海口 秀英
    "500103",  # 重庆 渝中
    "510104",  # 成都 锦江
    "520102",  # 贵阳 南明
    "530102",  # 昆明 五华
    "540102",  # 拉萨 城关
    "610113",  # 西安 雁塔
    "620102",  # 兰州 城关
    "630102",  # 西宁 城东
    "640104",  # 银川 兴庆
    "650102",  # 乌鲁木齐 天山
    "810000",  # 香港居民居住证
    "820000",  # 澳门居民居住证
    "830000",  # 台湾居民居住证
)


def cn_resident_id_check(first17: str) -> str:
    """The GB 11643 check character for the first 17 digits."""
    total = sum(int(c) * w for c, w in zip(first17, _ID_WEIGHTS, strict=True))
    return _ID_CHECK[total % 11]


def resident_id_valid(value: str) -> bool:
    """An 18-character resident ID with a real birth date and a correct check character."""
    if len(value) != 18 or not value[:17].isdigit():
        return False
    try:
        dt.date(int(value[6:10]), int(value[10:12]), int(value[12:14]))
    except ValueError:
        return False
    return cn_resident_id_check(value[:17]) == value[17].upper()


def _birth_date(rng: random.Random, first: int, last: int) -> dt.date:
    start = dt.date(first, 1, 1).toordinal()
    end = dt.date(last, 12, 31).toordinal()
    return dt.date.fromordinal(rng.randint(start, end))


def cn_resident_id(rng: random.Random) -> str:
    """A valid 18-digit resident ID: real region, real past birth date, correct check."""
    region = rng.choice(REGION_CODES)
    born = _birth_date(rng, 1950, 2005)
    body = f"{region}{born:%Y%m%d}{rng.randint(1, 999):03d}"
    return body + cn_resident_id_check(body)


def cn_resident_id_15(rng: random.Random) -> str:
    """The old 15-digit form: region, YYMMDD, 3-digit sequence, no check character."""
    region = rng.choice(REGION_CODES[:-3])
    born = _birth_date(rng, 1940, 1980)
    return f"{region}{born:%y%m%d}{rng.randint(1, 999):03d}"


def cn_resident_id_bad_check(rng: random.Random) -> str:
    """Looks like a resident ID (region, date) but the check character is wrong."""
    valid = cn_resident_id(rng)
    wrong = [c for c in "0123456789" if c != valid[17]]
    return valid[:17] + rng.choice(wrong)


# --- Luhn: bank cards and credit cards -----------------------------------------------------


def luhn_check_digit(partial: str) -> str:
    """The digit that makes ``partial + digit`` pass Luhn."""
    total = 0
    for i, c in enumerate(reversed(partial)):
        d = int(c)
        if i % 2 == 0:  # these get doubled once the check digit is appended
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def luhn_valid(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return len(digits) > 1 and total % 10 == 0


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def _luhn_number(rng: random.Random, prefix: str, length: int) -> str:
    partial = prefix + _digits(rng, length - len(prefix) - 1)
    return partial + luhn_check_digit(partial)


_UNIONPAY_BINS = ("622202", "621700", "622848", "621661", "622588", "622262", "623668", "621226")


def unionpay_card(rng: random.Random) -> str:
    """A Luhn-valid UnionPay debit card number, 16 or 19 digits, starting 62."""
    return _luhn_number(rng, rng.choice(_UNIONPAY_BINS), rng.choice((16, 19, 19)))


def credit_card(rng: random.Random) -> str:
    """A Luhn-valid Visa (16), Mastercard (16) or Amex (15) number."""
    issuer = rng.choice(("visa", "visa", "mastercard", "mastercard2", "amex"))
    if issuer == "visa":
        return _luhn_number(rng, "4" + _digits(rng, 5), 16)
    if issuer == "mastercard":
        return _luhn_number(rng, str(rng.randint(51, 55)), 16)
    if issuer == "mastercard2":
        return _luhn_number(rng, str(rng.randint(2221, 2720)), 16)
    return _luhn_number(rng, rng.choice(("34", "37")), 15)


def luhn_failing(rng: random.Random, prefix: str = "", length: int = 16) -> str:
    """A number of ``length`` digits that fails Luhn."""
    valid = _luhn_number(rng, prefix or str(rng.randint(1, 9)), length)
    last = int(valid[-1])
    return valid[:-1] + str((last + rng.randint(1, 9)) % 10)


def group_digits(number: str, sizes: tuple[int, ...], sep: str = " ") -> str:
    """``6222021234567890`` with sizes (4, 4, 4, 4) becomes ``6222 0212 3456 7890``."""
    parts: list[str] = []
    pos = 0
    for size in sizes:
        if pos >= len(number):
            break
        parts.append(number[pos : pos + size])
        pos += size
    if pos < len(number):
        parts.append(number[pos:])
    return sep.join(parts)


# --- GB 32100-2015 unified social credit code ----------------------------------------------

USCC_ALPHABET = "0123456789ABCDEFGHJKLMNPQRTUWXY"
_USCC_WEIGHTS = (1, 3, 9, 27, 19, 26, 16, 17, 20, 29, 25, 13, 8, 24, 10, 30, 28)
_ORG_WEIGHTS = (3, 7, 9, 10, 5, 8, 4, 2)


def uscc_check(first17: str) -> str:
    total = sum(USCC_ALPHABET.index(c) * w for c, w in zip(first17, _USCC_WEIGHTS, strict=True))
    return USCC_ALPHABET[(31 - total % 31) % 31]


def org_code_check(first8: str) -> str:
    """GB 11714 organisation code check (letters count A=10 … Z=35)."""
    total = sum(int(c, 36) * w for c, w in zip(first8, _ORG_WEIGHTS, strict=True))
    check = 11 - total % 11
    return {10: "X", 11: "0"}.get(check, str(check))


def uscc_valid(value: str) -> bool:
    if len(value) != 18 or any(c not in USCC_ALPHABET for c in value):
        return False
    return uscc_check(value[:17]) == value[17]


def uscc(rng: random.Random) -> str:
    """A valid USCC: registration authority, class, region, organisation code, check."""
    head = rng.choice(("91", "91", "91", "92", "12", "52", "93"))
    region = rng.choice(REGION_CODES[:-3])
    if rng.random() < 0.6:
        org8 = "MA" + "".join(rng.choice("0123456789ABCDEFGHJKLMNPQRTUWXY") for _ in range(6))
    else:
        org8 = _digits(rng, 8)
    org9 = org8 + org_code_check(org8)
    if any(c not in USCC_ALPHABET for c in org9):
        return uscc(rng)
    body = head + region + org9
    return body + uscc_check(body)


def uscc_bad_check(rng: random.Random) -> str:
    valid = uscc(rng)
    wrong = [c for c in USCC_ALPHABET if c != valid[17]]
    return valid[:17] + rng.choice(wrong)


# --- Hong Kong and Taiwan identity cards -----------------------------------------------------


def hkid_check(prefix: str, digits6: str) -> str:
    """Check character of an HKID; a single-letter prefix counts a leading space as 36."""
    letters = prefix.rjust(2)
    values = [36 if c == " " else ord(c) - ord("A") + 10 for c in letters]
    values += [int(c) for c in digits6]
    total = sum(v * w for v, w in zip(values, range(9, 1, -1), strict=True))
    check = (11 - total % 11) % 11
    return "A" if check == 10 else str(check)


def hkid(rng: random.Random) -> str:
    """An HKID with parentheses around the check character, e.g. ``C668668(9)``."""
    prefix = rng.choice(string.ascii_uppercase.replace("I", "").replace("O", ""))
    if rng.random() < 0.1:
        prefix = "X" + rng.choice("ABCDEFG")
    body = _digits(rng, 6)
    return f"{prefix}{body}({hkid_check(prefix, body)})"


def hkid_bad_check(rng: random.Random) -> str:
    good = hkid(rng)
    right = good[-2]
    wrong = rng.choice([c for c in "0123456789A" if c != right])
    return good[:-2] + wrong + ")"


_TW_LETTERS = {
    **{c: 10 + i for i, c in enumerate("ABCDEFGH")},
    **{c: 18 + i for i, c in enumerate("JKLMN")},
    **{c: 23 + i for i, c in enumerate("PQRSTUV")},
    "I": 34,
    "O": 35,
    "W": 32,
    "X": 30,
    "Y": 31,
    "Z": 33,
}
_TW_WEIGHTS = (1, 9, 8, 7, 6, 5, 4, 3, 2, 1, 1)


def _tw_sum(letter: str, digits: str) -> int:
    value = _TW_LETTERS[letter]
    nums = [value // 10, value % 10] + [int(c) for c in digits]
    return sum(n * w for n, w in zip(nums, _TW_WEIGHTS, strict=True))


def twid_valid(value: str) -> bool:
    return (
        len(value) == 10
        and value[0] in _TW_LETTERS
        and value[1] in "12"
        and value[1:].isdigit()
        and _tw_sum(value[0], value[1:]) % 10 == 0
    )


def twid(rng: random.Random) -> str:
    letter = rng.choice("ABCDEFGHJKLMNPQTUVWXZ")
    body = rng.choice("12") + _digits(rng, 7)
    for last in "0123456789":
        if _tw_sum(letter, body + last) % 10 == 0:
            return letter + body + last
    raise AssertionError("unreachable: one digit always closes the sum")


# --- IBAN (ISO 13616, ISO 7064 mod 97-10) ----------------------------------------------------


def _iban_number(text: str) -> int:
    return int("".join(str(int(c, 36)) for c in text))


def iban_check_digits(country: str, bban: str) -> str:
    return f"{98 - _iban_number(bban + country + '00') % 97:02d}"


def iban_valid(value: str) -> bool:
    compact = value.replace(" ", "").upper()
    return len(compact) > 4 and _iban_number(compact[4:] + compact[:4]) % 97 == 1


def _alnum(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(n))


def _letters(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.ascii_uppercase) for _ in range(n))


def iban(rng: random.Random) -> str:
    """A valid IBAN (compact) for one of a few countries with their real BBAN shapes."""
    country = rng.choice(("DE", "GB", "FR", "NL", "ES", "IT", "CH"))
    bban = {
        "DE": lambda: _digits(rng, 18),
        "GB": lambda: _letters(rng, 4) + _digits(rng, 14),
        "FR": lambda: _digits(rng, 10) + _alnum(rng, 11) + _digits(rng, 2),
        "NL": lambda: _letters(rng, 4) + _digits(rng, 10),
        "ES": lambda: _digits(rng, 20),
        "IT": lambda: _letters(rng, 1) + _digits(rng, 10) + _alnum(rng, 12),
        "CH": lambda: _digits(rng, 5) + _alnum(rng, 12),
    }[country]()
    return country + iban_check_digits(country, bban) + bban


def iban_bad_check(rng: random.Random) -> str:
    good = iban(rng)
    wrong = rng.choice([f"{n:02d}" for n in range(2, 99) if f"{n:02d}" != good[2:4]])
    return good[:2] + wrong + good[4:]


def spaced_iban(compact: str) -> str:
    return " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))


# --- Phones --------------------------------------------------------------------------------

_MOBILE_PREFIXES = tuple(
    [f"13{d}" for d in range(10)]
    + ["150", "151", "152", "153", "155", "156", "157", "158", "159"]
    + ["166", "173", "175", "176", "177", "178"]
    + [f"18{d}" for d in range(10)]
    + ["191", "193", "195", "198", "199"]
)


def mobile(rng: random.Random) -> str:
    """An 11-digit mainland mobile number in an allocated range."""
    return rng.choice(_MOBILE_PREFIXES) + _digits(rng, 8)


_AREA_CODES = (
    "010",
    "020",
    "021",
    "022",
    "023",
    "024",
    "025",
    "027",
    "028",
    "029",
    "0755",
    "0571",
    "0512",
    "0532",
    "0591",
    "0731",
    "0871",
    "0898",
)


def landline_parts(rng: random.Random) -> tuple[str, str]:
    """(area code, local number): 8 digits after a 3-digit code, 7 or 8 after a 4-digit one."""
    area = rng.choice(_AREA_CODES)
    length = 8 if len(area) == 3 else rng.choice((7, 8))
    return area, str(rng.randint(2, 8)) + _digits(rng, length - 1)


# --- Other identifiers ---------------------------------------------------------------------


def us_ssn(rng: random.Random) -> str:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    return f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


def ipv4(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:
        return f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    if kind < 0.5:
        return f"192.168.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    if kind < 0.6:
        return f"172.{rng.randint(16, 31)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    first = rng.choice((36, 58, 61, 101, 106, 112, 114, 119, 120, 183, 203, 211, 221, 223))
    return f"{first}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def ipv6(rng: random.Random) -> str:
    prefix = rng.choice(("2001:db8", "240e:3a1", "2409:8a55", "fe80:0", "2408:8207"))
    groups = prefix.split(":") + [f"{rng.randint(0, 0xFFFF):x}" for _ in range(6)]
    if rng.random() < 0.5:  # runs of zero groups that compress to ::
        start = rng.randint(2, 5)
        for i in range(start, start + 2):
            groups[i] = "0"
    address = ipaddress.IPv6Address(":".join(groups))
    return address.compressed if rng.random() < 0.8 else address.exploded


def passport(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return "E" + _digits(rng, 8)
    letter = rng.choice(string.ascii_uppercase.replace("I", "").replace("O", ""))
    return "E" + letter + _digits(rng, 7)


def travel_permit(rng: random.Random) -> str:
    return rng.choice("HMC") + _digits(rng, 8)


_PROVINCE_CHARS = "京津沪渝冀豫云辽黑湘皖鲁新苏浙赣鄂桂甘晋蒙陕吉闽贵粤青藏川宁琼"
_PLATE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"


def license_plate(rng: random.Random) -> str:
    head = rng.choice(_PROVINCE_CHARS) + rng.choice(_PLATE_LETTERS[:12])
    sep = rng.choice(("", "", "", "·"))
    if rng.random() < 0.3:  # new-energy plate: D/F + 5 characters
        tail = rng.choice("DF") + _digits(rng, 5)
    else:
        chars = [rng.choice(string.digits) for _ in range(5)]
        if rng.random() < 0.4:
            chars[rng.randint(0, 1)] = rng.choice(_PLATE_LETTERS)
        tail = "".join(chars)
    return head + sep + tail


# --- Secrets -------------------------------------------------------------------------------

_B64URL = string.ascii_letters + string.digits + "-_"
_ALNUM = string.ascii_letters + string.digits


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url_json(value: dict[str, object]) -> str:
    raw = json.dumps(value, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def api_secret(rng: random.Random, kind: str | None = None) -> str:
    """An API secret shaped like a real one (random, never a real credential)."""
    kind = kind or rng.choice(("aws", "google", "openai", "github", "jwt"))
    if kind == "aws":
        return "AKIA" + _pick(rng, string.ascii_uppercase + "234567", 16)
    if kind == "google":
        return "AIza" + _pick(rng, _B64URL, 35)
    if kind == "openai":
        if rng.random() < 0.5:
            return "sk-" + _pick(rng, _ALNUM, 48)
        return "sk-proj-" + _pick(rng, _B64URL, 56)
    if kind == "github":
        return "ghp_" + _pick(rng, _ALNUM, 36)
    if kind == "jwt":
        header = _b64url_json({"alg": rng.choice(("HS256", "RS256")), "typ": "JWT"})
        payload = _b64url_json(
            {
                "sub": str(rng.randint(10000, 99999)),
                "iat": rng.randint(1_700_000_000, 1_760_000_000),
            }
        )
        return f"{header}.{payload}.{_pick(rng, _B64URL, 43)}"
    raise ValueError(kind)


def pem_block(rng: random.Random, label: str = "RSA PRIVATE KEY", newline: str = "\n") -> str:
    """A PEM block with random base64 inside (``newline`` may be the two characters ``\\n``)."""
    alphabet = string.ascii_letters + string.digits + "+/"
    lines = ["MIIE" + _pick(rng, alphabet, 60)] + [_pick(rng, alphabet, 64) for _ in range(4)]
    lines.append(_pick(rng, alphabet, 20) + "==")
    return newline.join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"])


# --- Hashes and other look-alikes ----------------------------------------------------------


def hex_string(rng: random.Random, n: int) -> str:
    return _pick(rng, "0123456789abcdef", n)


def hex_with_mobile_run(rng: random.Random, n: int) -> str:
    """A hex string with a mobile-shaped digit run between two letters inside it."""
    run = "a" + mobile(rng) + "e"
    head = rng.randint(2, n - len(run) - 2)
    text = hex_string(rng, head) + run
    return text + hex_string(rng, n - len(text))


def self_test() -> None:
    """Published test vectors; raises AssertionError on a broken implementation."""
    assert resident_id_valid("11010519491231002X")
    assert resident_id_valid("440524188001010014")
    assert not resident_id_valid("110105194912310021")
    assert hkid_check("C", "668668") == "9"
    assert twid_valid("A123456789")
    assert luhn_valid("4111111111111111")
    assert not luhn_valid("4111111111111112")
    assert uscc_valid("91350100M000100Y43")
    assert org_code_check("M000100Y") == "4"
    assert iban_valid("DE89370400440532013000")
    assert iban_valid("GB82 WEST 1234 5698 7654 32")
    assert iban_check_digits("DE", "370400440532013000") == "89"
    rng = random.Random(0)
    for _ in range(200):
        assert resident_id_valid(cn_resident_id(rng))
        assert luhn_valid(unionpay_card(rng))
        assert luhn_valid(credit_card(rng))
        assert not luhn_valid(luhn_failing(rng))
        assert uscc_valid(uscc(rng))
        assert not uscc_valid(uscc_bad_check(rng))
        assert twid_valid(twid(rng))
        assert iban_valid(iban(rng))
        assert not iban_valid(iban_bad_check(rng))
        assert not resident_id_valid(cn_resident_id_bad_check(rng))


if __name__ == "__main__":
    self_test()
    print("identifiers: all test vectors pass")
