"""Run by tests/redaction/test_native.py in a process of its own: what the detection modules
make of each text on stdin (a JSON list), and whether they are the compiled ones.

Not a test module: it is started twice, with and without ``LOCALGATE_PURE_PYTHON``.
"""

from __future__ import annotations

import json
import sys

from localgate.config import RedactionSettings
from localgate.redaction import fold, names, native, placeholders, recognizers, reveal, session
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
        "counts": sorted([*key, count] for key, count in redactor.counts.items()),
        "refusals": redactor.refusals(text[:64]),
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
        for module in (fold, names, recognizers, reveal, placeholders, session)
    }
    status = native.status()
    json.dump({"compiled": status.compiled, "modules": modules, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
