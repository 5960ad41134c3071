"""Redaction-quality benchmark: a labelled PII corpus and an evaluator.

``python -m bench.pii.generate`` rewrites ``bench/pii/corpus.jsonl`` (deterministic);
``python -m bench.pii.evaluate`` scores localgate's detector and Microsoft Presidio against
it. See ``docs/redaction-quality.md``.
"""
