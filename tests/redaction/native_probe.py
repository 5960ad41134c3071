"""Run by tests/redaction/test_native.py in a process of its own: what the detection modules
make of each text on stdin (a JSON list), and whether they are the compiled ones.

Not a test module: it is started twice, with and without ``LOCALGATE_PURE_PYTHON``.
"""

from __future__ import annotations

import json
import sys

from localgate.redaction import fold, names, native, recognizers, reveal
from localgate.redaction.detector import Detector


def main() -> None:
    texts = json.load(sys.stdin)
    detector = Detector.builtin()
    results = [
        {
            "findings": [[f.start, f.end, f.type, f.score] for f in detector.detect(text)],
            "folded": fold.fold(text),
            "plain": reveal.plain(text),
        }
        for text in texts
    ]
    modules = {module.__name__: module.__file__ for module in (fold, names, recognizers, reveal)}
    status = native.status()
    json.dump({"compiled": status.compiled, "modules": modules, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
