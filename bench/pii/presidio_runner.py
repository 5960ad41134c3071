"""Run Microsoft Presidio over JSON lines; executed by ``bench.pii.evaluate`` in its own venv.

    bench/pii/.venv-presidio/bin/python bench/pii/presidio_runner.py < texts.jsonl

Reads ``{"id", "text"}`` lines, writes ``{"id", "entities": [{"start", "end", "type",
"score"}]}`` lines with Presidio's own entity names, then one ``{"_meta": ...}`` line with
the analysis time and configuration.

Offline by construction. spaCy models cannot be downloaded here, so the NLP engine is
``spacy.blank("en")`` (a tokenizer, no NER, no lemmatizer) with a one-line component that
sets each token's lemma to its lower-cased text, so Presidio's context words still work.
Every predefined recognizer that Presidio enables for English is used as shipped; the only
change is that the phone recognizer also tries region ``CN``. tldextract (used by the
e-mail recognizer) is pointed at its bundled public-suffix snapshot instead of the network.

This file imports Presidio and spaCy through ``importlib`` so that it type-checks in the
project's venv, where neither is installed.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from typing import Any

os.environ["TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS"] = ""  # never fetch the suffix list

DEFAULT_PHONE_REGIONS = ("US", "GB", "DE", "FR", "IL", "IN", "CA", "BR")


def build_analyzer(cn_phone: bool = True) -> Any:
    spacy = importlib.import_module("spacy")
    spacy_language = importlib.import_module("spacy.language")
    nlp_engine_mod = importlib.import_module("presidio_analyzer.nlp_engine")
    analyzer_mod = importlib.import_module("presidio_analyzer")
    recognizers = importlib.import_module("presidio_analyzer.predefined_recognizers")

    if "lowercase_lemma" not in spacy_language.Language.factories:

        def lowercase_lemma(doc: Any) -> Any:
            for token in doc:
                token.lemma_ = token.lower_
            return doc

        spacy_language.Language.component("lowercase_lemma")(lowercase_lemma)

    base: Any = nlp_engine_mod.SpacyNlpEngine

    class BlankSpacyNlpEngine(base):  # type: ignore[misc]
        """SpacyNlpEngine over spacy.blank("en"): loads nothing from disk or network."""

        def load(self) -> None:
            nlp = spacy.blank("en")
            nlp.add_pipe("lowercase_lemma")
            self.nlp = {"en": nlp}

    engine = BlankSpacyNlpEngine(models=[{"lang_code": "en", "model_name": "blank_en"}])
    engine.load()
    analyzer = analyzer_mod.AnalyzerEngine(nlp_engine=engine, supported_languages=["en"])
    if cn_phone:
        analyzer.registry.remove_recognizer("PhoneRecognizer")
        analyzer.registry.add_recognizer(
            recognizers.PhoneRecognizer(supported_regions=(*DEFAULT_PHONE_REGIONS, "CN"))
        )
    return analyzer


def main() -> None:
    cn_phone = "--no-cn-phone" not in sys.argv[1:]
    analyzer = build_analyzer(cn_phone=cn_phone)
    rows = [json.loads(line) for line in sys.stdin if line.strip()]
    analyzer.analyze(text="warm up 13812345678 a@b.com", language="en")
    results: list[dict[str, Any]] = []
    timings: list[float] = []
    for _ in range(2):  # the fastest of two passes: the machine may be shared
        results = []
        started = time.perf_counter()
        for row in rows:
            found = analyzer.analyze(text=row["text"], language="en")
            results.append(
                {
                    "id": row["id"],
                    "entities": [
                        {"start": r.start, "end": r.end, "type": r.entity_type, "score": r.score}
                        for r in found
                    ],
                }
            )
        timings.append(time.perf_counter() - started)
    elapsed = min(timings)
    out = sys.stdout
    for result in results:
        out.write(json.dumps(result, ensure_ascii=False) + "\n")
    version = importlib.import_module("importlib.metadata").version("presidio-analyzer")
    names = sorted({type(r).__name__ for r in analyzer.registry.recognizers})
    meta = {"seconds": elapsed, "version": version, "cn_phone": cn_phone, "recognizers": names}
    out.write(json.dumps({"_meta": meta}) + "\n")


if __name__ == "__main__":
    main()
