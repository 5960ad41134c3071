"""A detector remembers the findings of a tenant's recent texts (``Detector.remembering``):
a conversation's history, sent again with every turn, is scanned once. What it gives must be
what a scan gives, per tenant, and a remembered text must be redacted exactly as before."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from localgate.redaction import detector as detector_module
from localgate.redaction.detector import Detector
from localgate.redaction.findings import Finding
from localgate.redaction.recognizers import Scan
from localgate.testing import FakeGemini
from tests.conftest import RunningGateway

PHONE = "13812345678"
REPO = Path(__file__).resolve().parents[2]


class Counting:
    """A recognizer that counts the texts it is asked to scan (and finds "secret")."""

    def __init__(self) -> None:
        self.scans = 0

    def find(self, scan: Scan) -> Iterable[Finding]:
        self.scans += 1
        at = scan.folded.find("secret")
        return [Finding(at, at + 6, "SECRET_WORD", 0.9)] if at >= 0 else []


def _detector(counting: Counting) -> Detector:
    return Detector.builtin(extra=[counting])


def test_a_text_seen_before_in_the_same_scope_is_not_scanned_again() -> None:
    counting = Counting()
    detect = _detector(counting).remembering("acme")
    first = detect(f"call me on {PHONE}, the secret is out")
    again = detect(f"call me on {PHONE}, the secret is out")
    assert again == first
    assert {finding.type for finding in first} == {"CN_MOBILE", "SECRET_WORD"}
    assert counting.scans == 1


def test_scopes_share_nothing() -> None:
    """Another tenant's identical text is scanned for it: no tenant can tell from the
    gateway's speed what another one sent."""
    counting = Counting()
    detector = _detector(counting)
    detector.remembering("acme")(f"call me on {PHONE}")
    detector.remembering("globex")(f"call me on {PHONE}")
    assert counting.scans == 2


def test_what_is_remembered_is_what_a_scan_finds() -> None:
    detector = Detector.builtin()
    detect = detector.remembering("acme")
    corpus = REPO / "bench" / "pii" / "corpus.jsonl"
    texts = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines()]
    assert len(texts) > 100
    for text in texts:
        assert detect(text) == detector.detect(text)
    for text in texts:  # now from memory
        assert detect(text) == detector.detect(text)


def test_a_caller_changing_its_list_does_not_change_what_is_remembered() -> None:
    detect = Detector.builtin().remembering("acme")
    found = detect(f"call me on {PHONE}")
    found.clear()
    assert [finding.type for finding in detect(f"call me on {PHONE}")] == ["CN_MOBILE"]


def test_texts_differing_only_in_what_folding_or_encoding_hides_are_told_apart() -> None:
    """Remembered by the exact text: a full-width or escaped spelling is another text,
    scanned in its own right, and its findings span its own characters."""
    detect = Detector.builtin().remembering("acme")
    plain = detect(f"call me on {PHONE}")
    wide = detect("call me on １３８１２３４５６７８")
    escaped = detect("call me on \\u0031\\u0033812345678")
    assert [(f.start, f.end) for f in plain] == [(11, 22)]
    assert [(f.start, f.end) for f in wide] == [(11, 22)]
    assert [(f.start, f.end, f.type) for f in escaped] == [(11, 32, "CN_MOBILE")]


def test_the_memory_is_bounded_and_forgets_the_least_recently_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(detector_module, "MEMO_ENTRIES", 2)
    counting = Counting()
    detect = _detector(counting).remembering("acme")
    detect("first secret")
    detect("second secret")
    detect("first secret")  # used again: now the second is the oldest
    detect("third secret")  # the second is forgotten
    assert counting.scans == 3
    detect("first secret")
    assert counting.scans == 3
    detect("second secret")
    assert counting.scans == 4


@pytest.fixture
def scanned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the gateway's detectors scan (not those they remember), in order."""
    texts: list[str] = []
    detect = Detector.detect

    def counting(self: Detector, text: str) -> list[Finding]:
        texts.append(text)
        return detect(self, text)

    monkeypatch.setattr(Detector, "detect", counting)
    return texts


def test_a_conversation_sent_again_is_redacted_as_the_first_time(
    gateway: RunningGateway, upstream: FakeGemini, scanned: list[str]
) -> None:
    """The second turn carries the first turn and the model's answer again: the upstream
    receives them redacted as it did the first time, without scanning the first turn
    again, and the counts (audit record) include the values in the history."""
    before = _texts(gateway)
    first_text = f"我的手机号是 {PHONE}，请记住"
    first_turn = {"role": "user", "parts": [{"text": first_text}]}
    first = gateway.generate({"contents": [first_turn]})
    assert first.status_code == 200, first.text
    answer = first.json()["candidates"][0]["content"]
    second = gateway.generate(
        {
            "contents": [
                first_turn,
                answer,
                {"role": "user", "parts": [{"text": "我的号码是多少？"}]},
            ]
        }
    )
    assert second.status_code == 200, second.text

    sent_first, sent_second = (request.body["contents"] for request in upstream.requests)
    assert PHONE not in str(sent_first)
    assert PHONE not in str(sent_second)
    assert sent_second[0] == sent_first[0]  # the same placeholder for the same value
    assert scanned.count(first_text) == 1
    # What operators see: the history's texts counted as remembered.
    after = _texts(gateway)
    assert after["remembered"] - before["remembered"] >= 2  # the first turn, the model name
    assert after["scanned"] - before["scanned"] == len(scanned)
    summaries = [
        gateway.audit_headers(response.headers["x-request-id"])[0]["redaction"]
        for response in (first, second)
    ]
    assert summaries[0] == {"CN_MOBILE": {"pseudonymize": 1}}
    # The answer echoed the phone number back restored: it counts in the history too.
    assert summaries[1] == {"CN_MOBILE": {"pseudonymize": 2}}


def _texts(gateway: RunningGateway) -> dict[str, float]:
    """localgate_redaction_texts_total by source, as /metrics shows it."""
    with gateway.client() as client:
        text = client.get("/metrics").text
    counts = {"remembered": 0.0, "scanned": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name == "localgate_redaction_texts":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counts[sample.labels["source"]] = sample.value
    return counts


def test_end_users_of_one_tenant_share_nothing_either(
    gateway: RunningGateway, scanned: list[str]
) -> None:
    """Remembered per tenant and end user (x-localgate-user): one user cannot time whether
    a colleague sent a text; one user's conversation is still scanned once."""
    text = f"客户的手机号 {PHONE}，请回电"
    body = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    for user in ("alice", "bob", "alice"):
        response = gateway.generate(body, **{"x-localgate-user": user})
        assert response.status_code == 200, response.text
    assert scanned.count(text) == 2


def test_a_scan_that_failed_is_not_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failing closed holds for a text seen before: nothing is remembered of a scan that
    raised, so the next request with it is scanned again (and refused again)."""
    detector = Detector.builtin()
    detect = detector.remembering("acme")
    real = Detector.detect

    def broken(self: Detector, text: str) -> list[Finding]:
        raise RuntimeError("recognizer crashed")

    monkeypatch.setattr(Detector, "detect", broken)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="recognizer crashed"):
            detect(f"call me on {PHONE}")
    monkeypatch.setattr(Detector, "detect", real)
    assert [finding.type for finding in detect(f"call me on {PHONE}")] == ["CN_MOBILE"]
