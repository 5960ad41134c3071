"""Run by tests/redaction/test_native.py in a process of its own: what the detection modules
make of each text on stdin (a JSON list), and whether they are the compiled ones.

Not a test module: it is started twice, with and without ``LOCALGATE_PURE_PYTHON``.
"""

from __future__ import annotations

import json
import sys

from localgate.config import RedactionSettings
from localgate.redaction import (
    answer,
    fold,
    names,
    native,
    placeholders,
    recognizers,
    reveal,
    session,
    signatures,
)
from localgate.redaction.detector import Detector
from localgate.redaction.request import redact_request_body
from localgate.redaction.session import RedactionSession


def _redacted(text: str, detector: Detector) -> dict[str, object]:
    """The text as the redaction stage sends it (in a request body, as a prompt, a
    function's arguments and a number), and the placeholders put back."""
    redactor = RedactionSession(RedactionSettings(), detector)
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": text}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"q": text}}}]},
        ],
        "generationConfig": {"seed": 13812345678},
    }
    sent = redact_request_body(None, body, redactor)  # type: ignore[arg-type]
    prompt = sent["contents"][0]["parts"][0]["text"]
    return {
        "sent": sent,
        "restored": redactor.pseudonyms.restore(prompt),
        "answer": _answered(prompt, redactor),
        "counts": sorted([*key, count] for key, count in redactor.counts.items()),
        "refusals": redactor.refusals(text[:64]),
    }


_SEAL = signatures.SignatureSeal(b"k" * 32)


def _answered(prompt: str, redactor: RedactionSession) -> dict[str, object]:
    """The prompt sent back as the upstream's answer, whole and as a stream of pieces of
    seven characters (placeholders cut across events), restored and sealed as the
    redaction stage does, with the answer scan on."""

    def seal(value: str) -> str:
        return _SEAL.seal("tenant", value)

    def event(text: str, last: bool) -> dict[str, object]:
        candidate: dict[str, object] = {"content": {"role": "model", "parts": [{"text": text}]}}
        if last:
            candidate["finishReason"] = "STOP"
            candidate["content"]["parts"].append({"text": "", "thoughtSignature": "c2ln"})  # type: ignore[index]
        return {"candidates": [candidate]}

    whole = answer.restore_answer(event(prompt, True), redactor.pseudonyms, redactor)
    stream = answer.StreamAnswerRestorer(redactor.pseudonyms, redactor)
    pieces = [prompt[at : at + 7] for at in range(0, len(prompt), 7)] or [""]
    events = [stream.event(event(piece, at == len(pieces) - 1)) for at, piece in enumerate(pieces)]
    return {
        "whole": signatures.seal_answer(whole, seal),
        "stream": [signatures.seal_answer(one, seal) for one in [*events, *stream.finish()]],
        "dangling": stream.dangling,
    }


def main() -> None:
    texts = json.load(sys.stdin)
    detector = Detector.builtin()
    results = [
        {
            "findings": [[f.start, f.end, f.type, f.score] for f in detector.detect(text)],
            "folded": fold.fold(text),
            "plain": reveal.plain(text),
            "redacted": _redacted(text, detector),
        }
        for text in texts
    ]
    modules = {
        module.__name__: module.__file__
        for module in (fold, names, recognizers, reveal, placeholders, session, answer, signatures)
    }
    status = native.status()
    json.dump({"compiled": status.compiled, "modules": modules, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
