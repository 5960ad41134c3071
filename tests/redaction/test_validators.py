"""Checksums against published test vectors and near misses."""

from __future__ import annotations

import pytest

from localgate.redaction import validators as v
from localgate.redaction.custom import VALIDATORS


@pytest.mark.parametrize("value", ["11010519491231002X", "440524188001010014"])
def test_resident_id_vectors(value: str) -> None:
    assert v.cn_resident_id(value)


@pytest.mark.parametrize(
    "value",
    [
        "110105194912310021",  # wrong check character
        "990105194912310028",  # no such province
        "110105194902300020",  # 30 February
        "110105209912310025",  # born in the future
    ],
)
def test_resident_id_near_misses(value: str) -> None:
    assert not v.cn_resident_id(value)


def test_luhn_and_issuers() -> None:
    assert v.luhn("4111 1111 1111 1111")
    assert not v.luhn("4111 1111 1111 1112")
    assert v.credit_card_issuer("378282246310005") == "amex"
    assert v.credit_card_issuer("5555555555554444") == "mastercard"
    assert v.credit_card_issuer("6222021234567890") == "unionpay"
    assert v.credit_card_issuer("1234567890123456") is None


def test_uscc_and_organisation_code() -> None:
    assert v.uscc("91350100M000100Y43")
    assert not v.uscc("91350100M000100Y44")


@pytest.mark.parametrize(
    ("check", "value", "expected"),
    [
        (v.iban, "GB82 WEST 1234 5698 7654 32", True),
        (v.iban, "GB83 WEST 1234 5698 7654 32", False),
        (v.us_ssn, "123-45-6789", True),
        (v.us_ssn, "666-45-6789", False),
        (v.us_ssn, "123-00-6789", False),
        (v.hk_id, "C668668(9)", True),
        (v.hk_id, "C668668(8)", False),
        (v.taiwan_id, "A123456789", True),
        (v.taiwan_id, "A123456788", False),
        (v.ipv4, "192.168.1.1", True),
        (v.ipv4, "256.1.1.1", False),
        (v.ipv6, "2001:db8::1", True),
        (v.ipv6, "12:30:45", False),
        (v.jwt, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc", True),
        (v.jwt, "eyJub3Rqc29uIjp9.eyJ4Ijp9.abc", False),
    ],
)
def test_other_checks(check: object, value: str, expected: bool) -> None:
    assert callable(check)
    assert check(value) is expected


@pytest.mark.parametrize(
    "value", ["91340104MAQDT2GM1U", "53640000MJX173680A", "53640000MJX173672F"]
)
def test_uscc_organisation_code_counts_letters_by_the_latin_alphabet(value: str) -> None:
    # GB 11714 values letters A=10 ... Z=35, unlike the USCC alphabet that skips I, O, S, V, Z.
    assert v.uscc(value)


@pytest.mark.parametrize("name", sorted(VALIDATORS))
def test_digits_that_are_not_decimal_are_refused_not_raised(name: str) -> None:
    # Superscripts count as digits to str.isdigit but int() refuses them: a custom rule's
    # pattern may let them through, and a validator that raised would fail the request.
    for value in (
        "1101051949123100²X",
        "4111 1111 1111 111²",
        "91350100M00000²0X",
        "1.2.3.²",
        "GB82 WEST 1234 5698 7654 3²",
        "GB82 WÉST 1234 5698 7654 32",
    ):
        assert VALIDATORS[name](value) is False
    assert v.hk_id("A12345²(3)") is False
    assert v.taiwan_id("A12345678²") is False
