"""The detection benchmark: its prompt, and the split by recognizer that times each one."""

from __future__ import annotations

from bench.detection import _REST, Timed, _labels, _split, corpus_texts, dense_text

from localgate.redaction.detector import Detector

DETECTOR = Detector.builtin()


def test_the_dense_prompt_is_dense() -> None:
    text = dense_text()

    assert 1000 < len(text.encode()) < 2000
    assert {f.type for f in DETECTOR.detect(text)} >= {
        "PERSON", "CN_ADDRESS", "CN_MOBILE", "CN_RESIDENT_ID", "EMAIL", "CN_BANK_CARD"
    }  # fmt: skip


def test_every_recognizer_has_its_own_label() -> None:
    labels = _labels(DETECTOR.recognizers)

    assert len(set(labels)) == len(labels) == len(DETECTOR.recognizers)
    assert "PERSON+CN_ADDRESS (names)" in labels


def test_timed_recognizers_find_and_gate_as_the_detector_does() -> None:
    spent: dict[str, int] = {}
    calls: dict[str, int] = {}
    timed = [Timed(r, str(i), spent, calls) for i, r in enumerate(DETECTOR.recognizers)]
    texts = [dense_text(), *corpus_texts()[:50]]

    assert [Detector(timed).detect(t) for t in texts] == [DETECTOR.detect(t) for t in texts]
    # Gated: not every recognizer ran on every text.
    assert 0 < min(calls.values()) < len(texts)


def test_the_split_covers_the_recognizers_that_ran_and_the_rest() -> None:
    split = _split(DETECTOR, [dense_text()], repeat=1)

    assert _REST in split
    assert "CN_RESIDENT_ID" in split
    assert "PERSON+CN_ADDRESS (names)" in split
    assert "IPV6" not in split  # its prefilter does not match the prompt
