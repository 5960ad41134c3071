"""Write the labelled PII corpus, ``bench/pii/corpus.jsonl``, deterministically.

    python -m bench.pii.generate [--out PATH] [--seed N]

A record is rendered from a template (``bench/pii/templates.py``) in which ``«TYPE»`` or
``«TYPE:variant»`` is an entity to detect, ``«~kind»`` a hard negative (a value that looks
like personal data and is not), ``«~kind=literal»`` a literal hard negative and ``«$name»``
unlabelled filler. Every record gets its own ``random.Random`` seeded from the seed, the
template and the record number, so editing one template leaves the others unchanged.

Each output line is ``{"id", "lang", "kind", "text", "entities": [{"start", "end",
"type"}], "hard_negatives": [{"start", "end", "kind"}], "template"}`` with offsets in Python
``str`` indices (code points), end exclusive.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.pii import identifiers as ids
from bench.pii.templates import TEMPLATES, Template

__all__ = ["CORPUS", "ENTITY_TYPES", "Record", "build_corpus", "load_corpus", "main"]

CORPUS = Path(__file__).with_name("corpus.jsonl")
SEED = 20240315

ENTITY_TYPES = (
    "CN_MOBILE",
    "CN_LANDLINE",
    "CN_RESIDENT_ID",
    "CN_BANK_CARD",
    "CN_USCC",
    "CN_PASSPORT",
    "CN_TRAVEL_PERMIT",
    "HK_ID",
    "TW_ID",
    "CN_LICENSE_PLATE",
    "EMAIL",
    "IPV4",
    "IPV6",
    "CREDIT_CARD",
    "US_SSN",
    "IBAN",
    "API_SECRET",
    "PERSON",
    "CN_ADDRESS",
)

Producer = Callable[[random.Random, str, str], str]  # (rng, lang, variant) -> value

_FULLWIDTH = str.maketrans(string.digits, "０１２３４５６７８９")


# --- Entity values -------------------------------------------------------------------------


def _weighted(rng: random.Random, choices: dict[str, int]) -> str:
    return rng.choices(list(choices), weights=list(choices.values()))[0]


def _mobile(rng: random.Random, lang: str, variant: str) -> str:
    number = ids.mobile(rng)
    if not variant:
        if lang == "zh":
            weights = {"plain": 45, "intl": 15, "spaced": 10, "dashed": 10, "fw": 12, "86": 8}
        else:
            weights = {"plain": 30, "intl": 25, "intl_spaced": 25, "dashed": 15, "86": 5}
        variant = _weighted(rng, weights)
    spaced = ids.group_digits(number, (3, 4, 4))
    return {
        "plain": number,
        "intl": "+86" + number,
        "86": "86" + number,
        "intl_spaced": "+86 " + spaced,
        "spaced": spaced,
        "dashed": ids.group_digits(number, (3, 4, 4), "-"),
        "fw": number.translate(_FULLWIDTH),
    }[variant]


def _landline(rng: random.Random, lang: str, variant: str) -> str:
    area, local = ids.landline_parts(rng)
    ext = str(rng.randint(100, 8999))
    if not variant:
        variant = _weighted(rng, {"dash": 40, "paren": 20, "ext": 15, "zhuan": 10, "intl": 15})
        if variant == "zhuan" and lang == "en":
            variant = "ext"
    return {
        "dash": f"{area}-{local}",
        "paren": f"({area}){local}",
        "ext": f"{area}-{local}-{ext}",
        "zhuan": f"{area}-{local}转{ext}",
        "intl": f"+86-{area[1:]}-{local}",
    }[variant]


def _resident_id(rng: random.Random, lang: str, variant: str) -> str:
    if variant == "15":
        return ids.cn_resident_id_15(rng)
    value = ids.cn_resident_id(rng)
    return value.translate(_FULLWIDTH) if variant == "fw" else value


def _bank_card(rng: random.Random, lang: str, variant: str) -> str:
    number = ids.unionpay_card(rng)
    variant = variant or _weighted(rng, {"plain": 60, "spaced": 35, "dashed": 5})
    if variant == "plain":
        return number
    return ids.group_digits(number, (4, 4, 4, 4), " " if variant == "spaced" else "-")


def _credit_card(rng: random.Random, lang: str, variant: str) -> str:
    number = ids.credit_card(rng)
    variant = variant or _weighted(rng, {"plain": 50, "spaced": 35, "dashed": 15})
    if variant == "plain":
        return number
    sizes = (4, 6, 5) if len(number) == 15 else (4, 4, 4, 4)
    return ids.group_digits(number, sizes, " " if variant == "spaced" else "-")


def _iban(rng: random.Random, lang: str, variant: str) -> str:
    value = ids.iban(rng)
    variant = variant or rng.choice(("compact", "spaced"))
    return ids.spaced_iban(value) if variant == "spaced" else value


def _passport(rng: random.Random, lang: str, variant: str) -> str:
    return ids.passport(rng)


def _travel_permit(rng: random.Random, lang: str, variant: str) -> str:
    if variant == "hm":
        return rng.choice("HM") + "".join(rng.choice(string.digits) for _ in range(8))
    if variant == "c":
        return "C" + "".join(rng.choice(string.digits) for _ in range(8))
    return ids.travel_permit(rng)


def _secret(rng: random.Random, lang: str, variant: str) -> str:
    if variant == "pem":
        label = rng.choice(
            ("RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY")
        )
        return ids.pem_block(rng, label)
    if variant == "pem_json":
        return ids.pem_block(rng, "PRIVATE KEY", newline="\\n")
    return ids.api_secret(rng, variant or None)


_ZH_SURNAMES = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何林罗高郑梁谢宋唐许韩冯邓曹彭曾肖田董潘袁蔡蒋余"
    "于杜叶程魏苏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙"
    "史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤"
)
_ZH_COMPOUND = ("欧阳", "司马", "诸葛", "上官", "东方", "慕容", "皇甫", "令狐", "司徒", "夏侯")
_ZH_GIVEN_1 = "伟芳娜敏静丽强磊军洋勇艳杰娟涛明超霞平刚华丹婷鑫倩颖琳晨阳辉斌宁健萍红玲燕亮峰波"
_ZH_GIVEN_2 = (
    "秀英",
    "桂英",
    "建华",
    "小明",
    "晓东",
    "子轩",
    "浩然",
    "欣怡",
    "梓涵",
    "一诺",
    "雨桐",
    "宇航",
    "思远",
    "佳怡",
    "志强",
    "海燕",
    "文博",
    "俊杰",
    "娜娜",
    "国庆",
    "春梅",
    "立新",
    "嘉豪",
    "诗涵",
    "明轩",
    "若曦",
    "振华",
    "丽娟",
)
_EN_FIRST = [
    "John",
    "Mary",
    "James",
    "Patricia",
    "Robert",
    "Jennifer",
    "Michael",
    "Linda",
    "David",
    "Elizabeth",
    "William",
    "Susan",
    "Sarah",
    "Emily",
    "Daniel",
    "Laura",
    "Kevin",
    "Rachel",
    "Thomas",
    "Olivia",
    "Grace",
    "Ethan",
    "Hannah",
    "Lucas",
    "Sophie",
    "Priya",
    "Ahmed",
    "Maria",
    "Carlos",
    "Anna",
    "Peter",
    "Chloe",
    "Mei",
    "Wei",
]
_EN_LAST = [
    "Smith",
    "Johnson",
    "Williams",
    "Brown",
    "Jones",
    "Garcia",
    "Miller",
    "Davis",
    "Martinez",
    "Anderson",
    "Taylor",
    "Moore",
    "Jackson",
    "Martin",
    "Lee",
    "Thompson",
    "White",
    "Harris",
    "Clark",
    "Lewis",
    "Walker",
    "Young",
    "Allen",
    "King",
    "Wright",
    "Scott",
    "Green",
    "Baker",
    "Adams",
    "Nelson",
    "Chen",
    "Wang",
    "Patel",
    "O'Brien",
    "Nguyen",
    "Zhang",
    "Fischer",
    "Rossi",
]


def _person(rng: random.Random, lang: str, variant: str) -> str:
    variant = variant or ("en" if lang == "en" else "zh")
    if variant == "en":
        first, last = rng.choice(_EN_FIRST), rng.choice(_EN_LAST)
        if rng.random() < 0.12:
            return f"{first} {rng.choice(string.ascii_uppercase)}. {last}"
        return f"{first} {last}"
    surname = rng.choice(_ZH_COMPOUND) if rng.random() < 0.08 else rng.choice(_ZH_SURNAMES)
    given = rng.choice(_ZH_GIVEN_1) if rng.random() < 0.4 else rng.choice(_ZH_GIVEN_2)
    return surname + given


_ZH_PLACES: tuple[tuple[str, str, tuple[tuple[str, tuple[str, ...]], ...]], ...] = (
    (
        "北京市",
        "",
        (
            ("朝阳区", ("建国路", "朝阳北路", "光华路", "望京街")),
            ("海淀区", ("中关村大街", "学院路", "知春路")),
        ),
    ),
    (
        "上海市",
        "",
        (
            ("浦东新区", ("世纪大道", "张杨路", "陆家嘴环路")),
            ("徐汇区", ("漕溪北路", "肇嘉浜路")),
            ("静安区", ("南京西路", "延安中路")),
        ),
    ),
    ("天津市", "", (("和平区", ("南京路", "滨江道")),)),
    ("重庆市", "", (("渝中区", ("民族路", "中山三路")),)),
    (
        "广东省",
        "深圳市",
        (("南山区", ("科苑路", "深南大道", "高新南七道")), ("福田区", ("福华三路", "益田路"))),
    ),
    (
        "广东省",
        "广州市",
        (("天河区", ("天河路", "花城大道")), ("越秀区", ("中山五路", "环市东路"))),
    ),
    (
        "浙江省",
        "杭州市",
        (("西湖区", ("文三路", "天目山路")), ("余杭区", ("文一西路", "五常大道"))),
    ),
    ("江苏省", "南京市", (("鼓楼区", ("中山北路", "汉中路")),)),
    ("江苏省", "苏州市", (("姑苏区", ("人民路", "干将西路")),)),
    ("四川省", "成都市", (("武侯区", ("人民南路四段", "天府大道北段")),)),
    ("湖北省", "武汉市", (("洪山区", ("珞喻路", "光谷大道")),)),
    ("陕西省", "西安市", (("雁塔区", ("科技路", "高新路")),)),
    ("山东省", "青岛市", (("市南区", ("香港中路", "东海西路")),)),
)
_ZH_BUILDINGS = ("国贸", "华润", "万达", "金茂", "世纪", "阳光", "时代", "科技", "东方")
_EN_PLACES = (
    ("Mountain View", "CA", "94043"),
    ("New York", "NY", "10118"),
    ("Seattle", "WA", "98109"),
    ("Austin", "TX", "78701"),
    ("Boston", "MA", "02110"),
    ("Chicago", "IL", "60601"),
    ("San Francisco", "CA", "94105"),
    ("Denver", "CO", "80202"),
)
_EN_STREETS = (
    "Amphitheatre Parkway",
    "Fifth Avenue",
    "Main Street",
    "Market Street",
    "Pine Street",
    "Oak Avenue",
    "Maple Drive",
    "Congress Avenue",
    "Michigan Avenue",
    "Harbor Boulevard",
)


def _address(rng: random.Random, lang: str, variant: str) -> str:
    variant = variant or ("en" if lang == "en" else "zh")
    if variant == "en":
        city, state, zipcode = rng.choice(_EN_PLACES)
        street = f"{rng.randint(1, 2999)} {rng.choice(_EN_STREETS)}"
        if rng.random() < 0.3:
            street += f", Suite {rng.randint(100, 999)}"
        return f"{street}, {city}, {state} {zipcode}"
    province, city, districts = rng.choice(_ZH_PLACES)
    district, roads = rng.choice(districts)
    head = province + city
    if city and rng.random() < 0.3:
        head = city  # "深圳市南山区…" without the province
    parts = [head, district, rng.choice(roads), f"{rng.randint(1, 999)}号"]
    tail = rng.random()
    floor = rng.randint(2, 32)
    room = f"{floor}{rng.randint(1, 12):02d}室"
    if tail < 0.25:
        parts.append(f"{rng.choice(_ZH_BUILDINGS)}大厦{floor}层")
    elif tail < 0.5:
        parts.append(f"{rng.choice(_ZH_BUILDINGS)}大厦{room}")
    elif tail < 0.7:
        parts.append(f"{rng.randint(1, 12)}栋{rng.randint(1, 4)}单元{room}")
    elif tail < 0.8:
        parts.append(f"院{rng.randint(1, 9)}号楼{room}")
    return "".join(parts)


def _email(rng: random.Random, lang: str, variant: str) -> str:
    pinyin = ("zhangwei", "li.na", "wangxm", "chen_jie88", "liuyang", "zhao.lei", "huangmin")
    english = ("john.smith", "msmith", "emily.chen", "d.garcia", "sarah_lee", "k.patel")
    local = rng.choice(pinyin + english)
    if rng.random() < 0.3:
        local += str(rng.randint(1, 99))
    domain = rng.choice(
        ("example.com", "qq.com", "163.com", "corp.example.cn", "gmail.com", "mail.example.org")
    )
    return f"{local}@{domain}"


ENTITY_PRODUCERS: dict[str, Producer] = {
    "CN_MOBILE": _mobile,
    "CN_LANDLINE": _landline,
    "CN_RESIDENT_ID": _resident_id,
    "CN_BANK_CARD": _bank_card,
    "CN_USCC": lambda rng, lang, v: ids.uscc(rng),
    "CN_PASSPORT": _passport,
    "CN_TRAVEL_PERMIT": _travel_permit,
    "HK_ID": lambda rng, lang, v: ids.hkid(rng),
    "TW_ID": lambda rng, lang, v: ids.twid(rng),
    "CN_LICENSE_PLATE": lambda rng, lang, v: ids.license_plate(rng),
    "EMAIL": _email,
    "IPV4": lambda rng, lang, v: ids.ipv4(rng),
    "IPV6": lambda rng, lang, v: ids.ipv6(rng),
    "CREDIT_CARD": _credit_card,
    "US_SSN": lambda rng, lang, v: ids.us_ssn(rng),
    "IBAN": _iban,
    "API_SECRET": _secret,
    "PERSON": _person,
    "CN_ADDRESS": _address,
}


# --- Hard negatives ------------------------------------------------------------------------


def _n(rng: random.Random, k: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(k))


def _when(rng: random.Random) -> dt.datetime:
    # Aware datetimes: the corpus must not depend on the machine's time zone.
    start = dt.datetime(2023, 1, 1, tzinfo=dt.UTC).timestamp()
    end = dt.datetime(2025, 12, 31, tzinfo=dt.UTC).timestamp()
    return dt.datetime.fromtimestamp(rng.uniform(start, end), tz=dt.UTC)


def _order_no(rng: random.Random, lang: str, variant: str) -> str:
    """18-20 digits with a mobile-shaped run inside."""
    shape = rng.randint(0, 3)
    if shape == 0:
        return f"{_when(rng):%Y%m%d}" + ids.mobile(rng) + _n(rng, rng.randint(0, 1))
    if shape == 1:
        return _n(rng, rng.randint(3, 5)) + ids.mobile(rng) + _n(rng, 4)
    if shape == 2:
        return "1" + ids.mobile(rng) + _n(rng, 7)
    return f"{_when(rng):%y%m%d}" + _n(rng, 2) + ids.mobile(rng)


def _version(rng: random.Random, lang: str, variant: str) -> str:
    variant = variant or rng.choice(("v", "ip", "build"))
    if variant == "v":
        return (
            f"v{rng.randint(1, 12)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}.{rng.randint(0, 99)}"
        )
    if variant == "ip":  # IPv4-shaped version numbers: 10.0.0.1, 4.3.2.1
        return f"{rng.randint(1, 12)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}.{rng.randint(1, 30)}"
    return f"{rng.randint(10, 120)}.0.{rng.randint(1000, 19999)}.{rng.randint(10, 3999)}"


def _tracking(rng: random.Random, lang: str, variant: str) -> str:
    shape = rng.randint(0, 3)
    if shape == 0:
        return "SF" + ids.mobile(rng) + _n(rng, 2)
    if shape == 1:
        return rng.choice(("YT", "JT", "ZT")) + _n(rng, 13)
    if shape == 2:
        return "75" + ids.mobile(rng) + _n(rng, 1)
    return "1Z" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(16))


def _date(rng: random.Random, lang: str, variant: str) -> str:
    when = _when(rng)
    if lang == "en" or variant == "en":
        return rng.choice((f"{when:%Y-%m-%d}", f"{when:%d/%m/%Y}", f"{when:%b %d, %Y}"))
    return rng.choice(
        (f"{when:%Y-%m-%d}", f"{when.year}年{when.month}月{when.day}日", f"{when:%Y%m%d}")
    )


def _price(rng: random.Random, lang: str, variant: str) -> str:
    value = rng.choice((rng.randint(9, 999), rng.randint(1000, 99999)))
    cents = rng.randint(0, 99)
    if variant == "plain":
        return f"{value}.{cents:02d}"
    if variant == "usd" or lang == "en":
        return rng.choice((f"${value:,}.{cents:02d}", f"USD {value}.{cents:02d}"))
    return rng.choice((f"{value}.{cents:02d}", f"{value:,}.{cents:02d}", str(value)))


def _uuid(rng: random.Random, lang: str, variant: str) -> str:
    h = ids.hex_string(rng, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{rng.choice('89ab')}{h[17:20]}-{h[20:]}"


def _product_code(rng: random.Random, lang: str, variant: str) -> str:
    shape = rng.randint(0, 3)
    color = rng.choice(("BLK", "WHT", "RED", "128G"))
    if shape == 0:
        return f"SKU-{ids.mobile(rng)}-{color}"
    if shape == 1:
        return f"HX-{_when(rng):%Y}-{_n(rng, 4)}-{rng.choice('ABC')}"
    if shape == 2:
        return f"P{ids.luhn_failing(rng, '62', 17)}"
    return f"{rng.choice(('MX', 'AR', 'ZK'))}{_n(rng, 3)}-{ids.mobile(rng)}"


def _mac(rng: random.Random, lang: str, variant: str) -> str:
    return ":".join(f"{rng.randint(0, 255):02X}" for _ in range(6))


def _vin(rng: random.Random, lang: str, variant: str) -> str:
    alphabet = "ABCDEFGHJKLMNPRSTUVWXYZ0123456789"
    return "LSV" + "".join(rng.choice(alphabet) for _ in range(6)) + _n(rng, 8)


def _isbn(rng: random.Random, lang: str, variant: str) -> str:
    return f"978-7-{rng.randint(100, 999)}-{rng.randint(10000, 99999)}-{rng.randint(0, 9)}"


def _sk_word(rng: random.Random, lang: str, variant: str) -> str:
    """Identifiers that merely contain ``sk-``."""
    shape = rng.randint(0, 2)
    if shape == 0:
        return rng.choice(("task-queue-worker", "risk-engine", "desk-booking", "disk-cleaner"))
    if shape == 1:
        return f"task-{ids.hex_string(rng, 32)}"
    return f"ask-{ids.hex_string(rng, 24)}-{rng.randint(1, 9)}"


_NEGATIVE_PRODUCERS: dict[str, Producer] = {
    "order_no": _order_no,
    "ts_ms": lambda rng, lang, v: str(int(_when(rng).timestamp() * 1000) + rng.randint(0, 999)),
    "ts_s": lambda rng, lang, v: str(int(_when(rng).timestamp())),
    "amount": lambda rng, lang, v: f"{ids.mobile(rng)}.{rng.choice(('00', '50', '99'))}",
    "tracking": _tracking,
    "git_sha": lambda rng, lang, v: (
        ids.hex_with_mobile_run(rng, 40) if rng.random() < 0.4 else ids.hex_string(rng, 40)
    ),
    "short_sha": lambda rng, lang, v: ids.hex_string(rng, rng.choice((7, 8, 10, 12))),
    "sha256": lambda rng, lang, v: ids.hex_with_mobile_run(rng, 64),
    "md5": lambda rng, lang, v: ids.hex_string(rng, 32),
    "uuid": _uuid,
    "version": _version,
    "product_code": _product_code,
    "invoice8": lambda rng, lang, v: _n(rng, 8),
    "invoice12": lambda rng, lang, v: "0" + _n(rng, 11),
    "invoice20": lambda rng, lang, v: f"{_when(rng):%y}44" + ids.mobile(rng) + _n(rng, 5),
    "invoice_en": lambda rng, lang, v: f"INV-{_when(rng):%Y}-{rng.randint(1, 99999):06d}",
    "po": lambda rng, lang, v: f"PO{_when(rng):%Y%m}{_n(rng, 5)}",
    "id_bad": lambda rng, lang, v: ids.cn_resident_id_bad_check(rng),
    "luhn_bad": lambda rng, lang, v: ids.luhn_failing(rng, rng.choice(("62", "4", "5")), 16),
    "uscc_bad": lambda rng, lang, v: ids.uscc_bad_check(rng),
    "hkid_bad": lambda rng, lang, v: ids.hkid_bad_check(rng),
    "iban_bad": lambda rng, lang, v: ids.iban_bad_check(rng),
    "date": _date,
    "datetime": lambda rng, lang, v: f"{_when(rng):%Y-%m-%d %H:%M:%S}",
    "iso_ts": lambda rng, lang, v: (
        f"{_when(rng):%Y-%m-%dT%H:%M:%S}.{rng.randint(0, 999):03d}+08:00"
    ),
    "clf_time": lambda rng, lang, v: f"{_when(rng):%d/%b/%Y:%H:%M:%S} +0800",
    "month": lambda rng, lang, v: f"{_when(rng):%Y-%m}",
    "price": _price,
    "percent": lambda rng, lang, v: f"{rng.uniform(0.5, 160):.1f}%",
    "room": lambda rng, lang, v: rng.choice(
        (
            f"{rng.randint(2, 30)}{rng.randint(1, 20):02d}",
            f"{rng.choice('ABC')}-{rng.randint(2, 30)}{rng.randint(1, 20):02d}",
        )
    ),
    "mac": _mac,
    "vin": _vin,
    "isbn": _isbn,
    "sk_word": _sk_word,
    "num11": lambda rng, lang, v: rng.choice(("10", "11", "12")) + _n(rng, 9),
    "num8": lambda rng, lang, v: str(rng.randint(2, 9)) + _n(rng, 7),
    "passport_like": lambda rng, lang, v: "E" + _n(rng, 8),
    "permit_like": lambda rng, lang, v: rng.choice("HMC") + _n(rng, 8),
    "hotline": lambda rng, lang, v: rng.choice(
        ("400-820-8820", "95588", "10086", "400 610 1688", "95533")
    ),
    "coords": lambda rng, lang, v: f"{rng.uniform(20, 45):.4f},{rng.uniform(100, 125):.4f}",
    "staff_id": lambda rng, lang, v: rng.choice(("", "A", "HR")) + _n(rng, rng.choice((5, 6))),
    "ticket": lambda rng, lang, v: f"{_when(rng):%Y%m%d}-{_n(rng, 5)}",
    "batch": lambda rng, lang, v: f"PAY-{_when(rng):%Y%m%d}-{_n(rng, 3)}",
    "duration": lambda rng, lang, v: f"{rng.randint(1, 900)}ms",
    "bytes": lambda rng, lang, v: str(rng.randint(10_000, 99_999_999)),
    "num_id": lambda rng, lang, v: str(rng.randint(10_000, 9_999_999)),
    "num6": lambda rng, lang, v: _n(rng, 6),
    "last4": lambda rng, lang, v: _n(rng, 4),
    "small": lambda rng, lang, v: str(rng.randint(2, 48)),
    "age": lambda rng, lang, v: str(rng.randint(18, 88)),
    "bed": lambda rng, lang, v: f"{rng.randint(1, 30)}-{rng.randint(1, 60):02d}",
    "inpatient_no": lambda rng, lang, v: f"ZY{_when(rng):%Y}{_n(rng, 6)}",
    "sample_no": lambda rng, lang, v: f"{_when(rng):%Y%m%d}{_n(rng, 4)}",
    "report_no": lambda rng, lang, v: f"TJ{_when(rng):%y%m%d}{_n(rng, 5)}",
    "mrn": lambda rng, lang, v: f"MRN-{_n(rng, 8)}",
    "accession": lambda rng, lang, v: f"ACC{_n(rng, 10)}",
    "meeting_id": lambda rng, lang, v: f"{_n(rng, 3)} {_n(rng, 3)} {_n(rng, 3)}",
    "device_id": lambda rng, lang, v: f"DEV-{ids.hex_string(rng, 12).upper()}",
    "serial": lambda rng, lang, v: f"SN{_when(rng):%y%m}{ids.mobile(rng)}",
    "errcode": lambda rng, lang, v: rng.choice(("isv.BUSINESS_LIMIT_CONTROL", "E1001", "40013")),
    "hostname": lambda rng, lang, v: f"node-{rng.randint(1, 64)}.cluster.local",
    "asset_tag": lambda rng, lang, v: f"IT-{_when(rng):%Y}-{_n(rng, 5)}",
    "pem_public": lambda rng, lang, v: ids.pem_block(
        rng, rng.choice(("PUBLIC KEY", "CERTIFICATE"))
    ),
    "hex40": lambda rng, lang, v: ids.hex_string(rng, 40),
}

_FILLERS: dict[str, tuple[str, ...]] = {
    "company": (
        "深圳市星河科技有限公司",
        "杭州云帆网络技术有限公司",
        "北京华信达商贸有限公司",
        "上海启明医疗器械有限公司",
        "成都锦程物流有限公司",
    ),
    "company_en": (
        "Acme Corp",
        "Northwind Traders",
        "Globex Ltd",
        "Initech GmbH",
        "Contoso Pharma",
    ),
    "dept": ("研发中心", "财务部", "人力资源部", "华南销售部", "客户服务部", "供应链管理部"),
    "title": ("高级工程师", "财务主管", "销售经理", "产品经理", "行政专员"),
    "title_en": ("Senior Engineer", "Account Manager", "Data Analyst", "Office Manager"),
    "hospital": ("市第一人民医院", "省人民医院", "协和医院", "华西医院"),
    "product": ("智能手表", "无线耳机", "空气净化器", "扫地机器人", "电动牙刷"),
}


# --- Rendering -----------------------------------------------------------------------------

_SLOT = re.compile(r"«([~$]?)([A-Za-z_0-9]+)(?::([a-z0-9_]+))?(?:=([^»]+))?»")


@dataclass
class Record:
    id: str
    lang: str
    kind: str
    text: str
    entities: list[dict[str, Any]] = field(default_factory=list)
    hard_negatives: list[dict[str, Any]] = field(default_factory=list)
    template: int = -1

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "lang": self.lang,
            "kind": self.kind,
            "text": self.text,
            "entities": self.entities,
            "hard_negatives": self.hard_negatives,
            "template": self.template,
        }


def render(
    template: str, rng: random.Random, lang: str
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """Fill every slot; return the text, the entity spans and the hard-negative spans."""
    out: list[str] = []
    pos = 0
    entities: list[dict[str, Any]] = []
    negatives: list[dict[str, Any]] = []
    last = 0
    for match in _SLOT.finditer(template):
        literal = template[last : match.start()]
        out.append(literal)
        pos += len(literal)
        last = match.end()
        sigil, name, variant, fixed = match.groups()
        variant = variant or ""
        if sigil == "$":
            value = rng.choice(_FILLERS[name])
        elif sigil == "~":
            value = fixed if fixed is not None else _NEGATIVE_PRODUCERS[name](rng, lang, variant)
            negatives.append({"start": pos, "end": pos + len(value), "kind": name})
        else:
            value = fixed if fixed is not None else ENTITY_PRODUCERS[name](rng, lang, variant)
            entities.append({"start": pos, "end": pos + len(value), "type": name})
        out.append(value)
        pos += len(value)
    out.append(template[last:])
    return "".join(out), entities, negatives


def _check_value(kind: str, value: str) -> bool:
    """Re-validate a rendered entity (guards the generators against regressions)."""
    folded = unicodedata.normalize("NFKC", value)
    digits = re.sub(r"[\s-]", "", folded)
    checks: dict[str, Callable[[], bool]] = {
        "CN_RESIDENT_ID": lambda: ids.resident_id_valid(digits) or len(digits) == 15,
        "CN_BANK_CARD": lambda: ids.luhn_valid(digits) and digits.startswith("62"),
        "CREDIT_CARD": lambda: ids.luhn_valid(digits) and not digits.startswith("62"),
        "CN_USCC": lambda: ids.uscc_valid(folded),
        "IBAN": lambda: ids.iban_valid(folded),
        "TW_ID": lambda: ids.twid_valid(folded),
        "HK_ID": lambda: ids.hkid_check(folded[:-9], folded[-9:-3]) == folded[-2],
    }
    check = checks.get(kind)
    return check() if check else True


def build_corpus(seed: int = SEED, templates: tuple[Template, ...] = TEMPLATES) -> list[Record]:
    records: list[Record] = []
    counters: Counter[tuple[str, str]] = Counter()
    for index, template in enumerate(templates):
        for i in range(template.count):
            rng = random.Random(f"{seed}/{index}/{i}")
            source = template.text(rng) if callable(template.text) else template.text
            text, entities, negatives = render(source, rng, template.lang)
            for entity in entities:
                value = text[entity["start"] : entity["end"]]
                if not _check_value(entity["type"], value):
                    raise ValueError(f"generated an invalid {entity['type']}: {value!r}")
            counters[template.lang, template.kind] += 1
            number = counters[template.lang, template.kind]
            records.append(
                Record(
                    id=f"{template.lang}-{template.kind}-{number:03d}",
                    lang=template.lang,
                    kind=template.kind,
                    text=text,
                    entities=entities,
                    hard_negatives=negatives,
                    template=index,
                )
            )
    return records


def load_corpus(path: Path = CORPUS) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def describe(records: list[Record]) -> str:
    """A short summary of the corpus (counts by language, kind, type; hard-negative share)."""
    by_lang = Counter(r.lang for r in records)
    by_kind = Counter(r.kind for r in records)
    by_type = Counter(e["type"] for r in records for e in r.entities)
    by_neg = Counter(n["kind"] for r in records for n in r.hard_negatives)
    with_neg = sum(1 for r in records if r.hard_negatives)
    only_neg = sum(1 for r in records if r.hard_negatives and not r.entities)
    lines = [
        f"records: {len(records)}",
        f"by lang: {dict(sorted(by_lang.items()))}",
        f"by kind: {dict(sorted(by_kind.items()))}",
        f"entities: {sum(by_type.values())} {dict(sorted(by_type.items()))}",
        f"hard-negative spans: {sum(by_neg.values())} {dict(sorted(by_neg.items()))}",
        f"records with hard negatives: {with_neg} ({with_neg / len(records):.1%}), "
        f"only hard negatives: {only_neg} ({only_neg / len(records):.1%})",
        f"text: {sum(len(r.text.encode()) for r in records)} bytes UTF-8",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=CORPUS)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    ids.self_test()
    records = build_corpus(args.seed)
    with args.out.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
    print(describe(records))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
