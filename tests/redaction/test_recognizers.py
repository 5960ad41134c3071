"""Detection on the text users send: Chinese text traps, look-alikes, offsets."""

from __future__ import annotations

import pytest

from localgate.redaction.detector import Detector


@pytest.fixture(scope="module")
def detector() -> Detector:
    return Detector.builtin()


def found(detector: Detector, text: str) -> list[tuple[str, str]]:
    return [(text[f.start : f.end], f.type) for f in detector.detect(text)]


def people(detector: Detector, text: str) -> list[str]:
    """The PERSON values found in ``text``."""
    return [value for value, kind in found(detector, text) if kind == "PERSON"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("手机号13812345678请回电", [("13812345678", "CN_MOBILE")]),
        ("电话：+86 138-1234-5678。", [("+86 138-1234-5678", "CN_MOBILE")]),
        ("邮箱zhangsan@example.com谢谢", [("zhangsan@example.com", "EMAIL")]),
        ("身份证号11010519491231002X", [("11010519491231002X", "CN_RESIDENT_ID")]),
        ("卡号6222021234567890128", [("6222021234567890128", "CN_BANK_CARD")]),
        ("座机(010)62345678-123", [("(010)62345678-123", "CN_LANDLINE")]),
        (
            "车牌粤B12345和新能源京AD12345",
            [("粤B12345", "CN_LICENSE_PLATE"), ("京AD12345", "CN_LICENSE_PLATE")],
        ),
        ("统一社会信用代码91350100M000100Y43", [("91350100M000100Y43", "CN_USCC")]),
        ("护照号码E12345678", [("E12345678", "CN_PASSPORT")]),
        ("港澳通行证C12345678", [("C12345678", "CN_TRAVEL_PERMIT")]),
        ("HKID C668668(9) and TW A123456789", [("C668668(9)", "HK_ID"), ("A123456789", "TW_ID")]),
        (
            "card 4111-1111-1111-1111 ssn 123-45-6789",
            [("4111-1111-1111-1111", "CREDIT_CARD"), ("123-45-6789", "US_SSN")],
        ),
        ("IBAN GB82WEST12345698765432.", [("GB82WEST12345698765432", "IBAN")]),
        (
            "server 10.1.2.3 and 2001:db8::8a2e:370:7334",
            [("10.1.2.3", "IPV4"), ("2001:db8::8a2e:370:7334", "IPV6")],
        ),
        ("key=AKIAIOSFODNN7EXAMPLE", [("AKIAIOSFODNN7EXAMPLE", "API_SECRET")]),
        (
            "token sk-proj-abc123def456ghi789jkl0",
            [("sk-proj-abc123def456ghi789jkl0", "API_SECRET")],
        ),
    ],
)
def test_finds(detector: Detector, text: str, expected: list[tuple[str, str]]) -> None:
    assert found(detector, text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "订单号20240315138123456789已发货",  # a phone-shaped run inside an order number
        "金额13812345678.00元",  # an amount
        "时间戳1710489600123",  # milliseconds since the epoch
        "提交 3f786850e387550fdab836ed7e6dc881de23001b",  # a git hash
        "版本v1.2.3.4发布",  # a version string
        "运单号 SF1234567890123 已签收",  # a tracking number
        "编号110105194912310021",  # an ID-shaped number with a wrong check digit
        "流水号6222021234567890129",  # card-shaped, fails Luhn
        "task-queue-worker-0123456789abcdefghij",  # contains "sk-" but is not a key
        "room 1203, floor 12, 2024-03-15 13:45:00",
        "uuid 123e4567-e89b-12d3-a456-426614174000",
        "商品编码SKU-17705608089-128G",  # a phone-shaped run glued into a product code
        "Device firmware version 10.0.7.26",  # a version, not an address
        "版本 1.6.4.17",
        "批号E08212684",  # passport-shaped, but no passport context
        "order 4271183077133723627",  # 19 digits, Luhn-valid by chance
    ],
)
def test_hard_negatives(detector: Detector, text: str) -> None:
    assert [t for t in found(detector, text) if t[1] not in ("PERSON", "CN_ADDRESS")] == []


def test_full_width_digits_are_found_at_their_original_offsets(detector: Detector) -> None:
    text = "手机：１３８１２３４５６７８，谢谢"

    findings = detector.detect(text)

    assert [(text[f.start : f.end], f.type) for f in findings] == [
        ("１３８１２３４５６７８", "CN_MOBILE")
    ]


def test_names_and_addresses(detector: Detector) -> None:
    text = "客户张伟住在北京市朝阳区建国路88号1202室，联系人欧阳娜娜。Dear Mr. John Smith,"

    assert found(detector, text) == [
        ("张伟", "PERSON"),
        ("北京市朝阳区建国路88号1202室", "CN_ADDRESS"),
        ("欧阳娜娜", "PERSON"),
        ("John Smith", "PERSON"),
    ]


@pytest.mark.parametrize(
    ("text", "name"),
    [
        # jieba glues these names onto their cue: 客户王 + 芳, 联系 + 人马 + 伟, 投诉 + 人孙伟.
        ("客户王芳，电话请回拨", "王芳"),
        ("联系人马伟，电话请回拨", "马伟"),
        ("申请人马丽已签字", "马丽"),
        ("投诉人孙伟，情绪稳定", "孙伟"),
        ("车主张晨，车牌已登记", "张晨"),
    ],
)
def test_a_name_glued_to_its_cue_is_found(detector: Detector, text: str, name: str) -> None:
    assert (name, "PERSON") in found(detector, text)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        # After a cue, a surname and one or two characters: here the second begins the
        # next word (回电, 电话, 本人, 手机号), which stays in the prompt the model reads.
        ("请给客户张伟回电，他的手机号是13812345678。", "张伟"),
        ("联系人王芳电话是010-62345678", "王芳"),
        ("客户李娜本人签字", "李娜"),
        ("联系人欧阳娜手机号已登记", "欧阳娜"),
        # Without a cue, jieba tags 张伟回 and 王芳们 as names.
        ("请给张伟回电话", "张伟"),
        ("通知王芳们明天到", "王芳"),
        # Three-character names are kept whole, also where jieba reads their last
        # character into the next word (徐志 + 明说, 王子 + 明已), and where it is one that
        # begins the next word elsewhere (朱思本, 王甲本 before 回电).
        ("客户张建国说他明天到", "张建国"),
        ("联系人王志强回电了", "王志强"),
        ("客户徐志明说他明天到", "徐志明"),
        ("联系人王子明已签字", "王子明"),
        ("员工朱思本请假", "朱思本"),
        ("请王甲本回电", "王甲本"),
        # Cut back, 高明 would be a common word and no name at all: left whole.
        ("客户高明回电", "高明回"),
    ],
)
def test_a_name_does_not_take_the_next_words_first_character(
    detector: Detector, text: str, name: str
) -> None:
    assert people(detector, text) == [name]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A greeting is not part of the name, and does not hide it.
        ("Hi Patricia Garcia, here is the key you asked for", ["Patricia Garcia"]),
        ("Hello Maria Z. Allen,", ["Maria Z. Allen"]),
        ("Thanks Mark Davis for the fix", ["Mark Davis"]),
        # Irish and Scottish surnames.
        ("Reference letter: Susan O'Brien worked with us", ["Susan O'Brien"]),
        ("John McDonald called twice", ["John McDonald"]),
        ("Mr. O'Connor and Dr. MacArthur", ["O'Connor", "MacArthur"]),
        # A greeting is no cue: what follows must still start with a first name.
        ("Hi Product Team, the release is out", []),
        ("Hello World", []),
        ("Hi Patricia,", []),
        ("The new MacBook Pro and McDonald Street", []),
        # Capitalised words before a first name are not the name, and do not hide it.
        ("The MacBook John Smith returned has a cracked screen.", ["John Smith"]),
        ("Order from McMaster Carr John Smith account", ["John Smith"]),
        ("New Apple MacBook Mary Jones returned it", ["Mary Jones"]),
        # ... but a first name inside a title-case phrase is not a name.
        ("San Jose Medical Center", []),
        ("Your Bill Is Ready", []),
        # The typographic apostrophe that word processors and phones write.
        ("Patrick O\u2019Brien called", ["Patrick O\u2019Brien"]),
    ],
)
def test_english_names_after_greetings_and_with_prefixes(
    detector: Detector, text: str, expected: list[str]
) -> None:
    assert people(detector, text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # jieba splits these surnames off their given names, tagging the surname alone.
        ("体检预约：董立新，身份证号已登记", ["董立新"]),
        ("住院登记：闫娜娜，床号20-15", ["闫娜娜"]),
        ("然后发给潘娜娜", ["潘娜娜"]),
        ("姜国庆，男，45岁", ["姜国庆"]),
        # A surname standing alone before a common word is no name with it.
        ("我们的佟已经准备好了", []),
        ("他说郝不错", []),
        # Nor, in running text, before an ordinary word (婚育 + 史 + 正常, 掉 + 毛 + 特别),
        # or after a list's bullet.
        ("患者婚育史正常，过敏史一般。", []),
        ("猫咪掉毛特别严重", []),
        ("1. 毛特别多怎么办", []),
    ],
)
def test_a_surname_split_off_its_given_name_is_joined_to_it(
    detector: Detector, text: str, expected: list[str]
) -> None:
    assert people(detector, text) == expected


@pytest.mark.parametrize(
    "text", ["客户明天再来电话", "客户方便的话请回电", "用户明白了", "患者严重的过敏史"]
)
def test_a_cue_before_a_common_word_finds_no_name(detector: Detector, text: str) -> None:
    assert people(detector, text) == []


def test_a_word_that_holds_a_whole_cue_is_not_a_name(detector: Detector) -> None:
    # 联系方式 is one word, not the cue 联系 and a person 方式.
    assert found(detector, "请留下联系方式，我们会回电") == []


def test_common_words_are_not_names(detector: Detector) -> None:
    assert found(detector, "高明的做法是先处理订单，北京市的天气很好") == []


def test_patterns_only_detector_skips_names() -> None:
    text = "客户张伟，手机13812345678"

    assert found(Detector.builtin(names=False), text) == [("13812345678", "CN_MOBILE")]


def test_private_key_blocks_without_an_end_are_found_once(detector: Detector) -> None:
    unterminated = "-----BEGIN PRIVATE KEY-----\nAAAA\n" * 1000

    findings = detector.detect("x " + unterminated)

    assert [(f.start, f.end, f.type) for f in findings] == [
        (2, 2 + len(unterminated), "API_SECRET")
    ]


def test_public_keys_are_not_secrets(detector: Detector) -> None:
    text = "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----"

    assert found(detector, text) == []


@pytest.mark.parametrize(
    "phone",
    [
        "138\u00a01234\u00a05678",  # no-break spaces, pasted from a word processor
        "138\u202f1234\u202f5678",  # narrow no-break spaces
        "138\u20131234\u20135678",  # en dashes
        "138.1234.5678",
        "\u0661\u0663\u0668\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668",  # Arabic-Indic
        "\U0001d7cf\U0001d7d1\U0001d7d6\U0001d7cf\U0001d7d0\U0001d7d1\U0001d7d2"
        "\U0001d7d3\U0001d7d4\U0001d7d5\U0001d7d6",  # mathematical digits (outside the BMP)
    ],
)
def test_phone_numbers_in_other_characters_are_found(detector: Detector, phone: str) -> None:
    text = f"手机{phone}，谢谢"

    assert found(detector, text) == [(phone, "CN_MOBILE")]


@pytest.mark.parametrize(
    "text",
    [
        # Dot leaders, a rule of dashes, full-width padding (folded to letters) or a token
        # glued in front: the run that ends at the "@" starts more than a window's padding
        # before it, and the address was not found at all.
        "Contact" + "." * 100 + "zhang.wei@example.com",
        "-" * 120 + "zhang.wei@example.com",
        "ｘ" * 150 + "zhang.wei@example.com",
        "eyJhbGciOiJIUzI1NiJ9" * 10 + "zhang.wei@example.com please",
        "邮箱" + "a" * 3000 + "@example.com",
    ],
)
def test_an_email_whose_local_part_starts_far_before_the_at_is_found(
    detector: Detector, text: str
) -> None:
    at = text.index("@")
    findings = detector.detect(text)

    assert [f.type for f in findings if f.start < at < f.end] == ["EMAIL"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Internationalised domains (and a look-alike letter from another script): the
        # whole address passed, as the domain pattern took ASCII only.
        ("mail zhang@bücher.de now", "zhang@bücher.de"),
        ("mail zhang@bu\u0308cher.de now", "zhang@bu\u0308cher.de"),
        ("mail zhang.wei@ex\u0430mple.com now", "zhang.wei@ex\u0430mple.com"),
        ("邮箱wei@пример.рф，谢谢", "wei@пример.рф"),
        ("li@ελληνικά.gr", "li@ελληνικά.gr"),
        # Chinese after the address is not part of it.
        ("邮箱zhang@example.com之后联系", "zhang@example.com"),
    ],
)
def test_an_email_with_an_internationalised_domain_is_found(
    detector: Detector, text: str, expected: str
) -> None:
    assert found(detector, text) == [(expected, "EMAIL")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A quoted local part (RFC 5321): nothing before the "@" started a run, and the
        # whole address passed.
        ('write to "zhang wei"@example.com today', '"zhang wei"@example.com'),
        ('邮箱"zhang.wei"@example.com，谢谢', '"zhang.wei"@example.com'),
        ('a@b "x"@example.org', '"x"@example.org'),
    ],
)
def test_an_email_with_a_quoted_local_part_is_found(
    detector: Detector, text: str, expected: str
) -> None:
    assert found(detector, text) == [(expected, "EMAIL")]


def test_recognizers_sharing_a_pattern_find_the_same_in_any_order() -> None:
    # The card shapes share one search; the context-only bank card searches only the
    # windows with a card word. Run first, its narrower search must not stand in for the
    # others': a valid card on a line without a card word is found either way.
    from localgate.redaction.recognizers import PatternRecognizer, builtin_recognizers
    from tests.redaction.values import luhn_complete

    cards = [
        r
        for r in builtin_recognizers()
        if isinstance(r, PatternRecognizer) and r.type in ("CN_BANK_CARD", "CREDIT_CARD")
    ]
    assert any(r.requires_context for r in cards)
    unionpay, visa = luhn_complete("622202123456789"), luhn_complete("411111111111111")
    text = f"卡号 {luhn_complete('880012345678901')}\n转账到 {unionpay}\nvisa {visa}\n"
    found = {(f.start, f.end, f.type) for f in Detector(cards).detect(text)}
    context_first = sorted(cards, key=lambda r: not r.requires_context)
    assert context_first[0].requires_context
    reordered = {(f.start, f.end, f.type) for f in Detector(context_first).detect(text)}

    assert reordered == found
    assert {text[start:end] for start, end, _ in found} >= {unionpay, visa}
