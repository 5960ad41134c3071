"""How one embedder and threshold is judged: hit ratio, wrong hits, the recommended threshold."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bench.cache.options import BUILTIN, MINILM
from bench.cache.quality import Quality, Served

__all__ = [
    "LANGUAGES",
    "RELATIONS",
    "WRONG_COST",
    "avoidable_rate",
    "balance",
    "embedders_of",
    "hit_ratio",
    "paraphrases",
    "recommend",
    "served_of",
    "wrong_rate",
]

LANGUAGES = {"en": "English", "zh": "Chinese", None: "both"}
RELATIONS = ("same request", "anchors differ", "embedder")
# How much worse a wrong answer is than a missed hit, when choosing a threshold: a
# judgement, not a measurement. A hit saves one upstream call; a wrong hit silently gives
# a user someone else's answer.
WRONG_COST = 10


def recommend(cells: Sequence[Quality], lang: str | None) -> tuple[Quality, bool]:
    """The threshold with the best balance, and whether that balance is positive at all."""
    best = max(cells, key=lambda cell: (balance(cell, lang), cell.threshold))
    return best, balance(best, lang) > 0


def embedders_of(quality: Sequence[Quality]) -> list[str]:
    """The embedders measured, in the report's order."""
    return [name for name in (BUILTIN, MINILM) if any(c.embedder == name for c in quality)]


def balance(cell: Quality, lang: str | None) -> int:
    """Paraphrases answered right, minus ``WRONG_COST`` times the avoidable wrong hits."""
    right = sum(s.right for s in paraphrases(cell, lang))
    return right - WRONG_COST * sum(s.avoidable for s in served_of(cell, lang))


def served_of(cell: Quality, lang: str | None, role: str | None = None) -> list[Served]:
    """The answers to questions in ``lang`` (None: both) of ``role`` (None: any)."""
    return [
        s
        for s in cell.served
        if (lang is None or s.question.lang == lang) and (role is None or s.question.role == role)
    ]


def paraphrases(cell: Quality, lang: str | None) -> list[Served]:
    """The answers to paraphrases, value swaps apart (they are exact hits at any threshold)."""
    return [s for s in served_of(cell, lang, "paraphrase") if s.question.kind != "value swap"]


def hit_ratio(cell: Quality, lang: str | None) -> float:
    """The share of paraphrases answered from their own seed's entry."""
    return _rate(paraphrases(cell, lang), lambda s: s.right)


def wrong_rate(cell: Quality, lang: str | None) -> float:
    """The share of questions answered from the wrong entry, or a near-miss from any."""
    return _rate(served_of(cell, lang), lambda s: s.wrong)


def avoidable_rate(cell: Quality, lang: str | None) -> float:
    """The share of questions given a wrong hit that some threshold would have prevented."""
    return _rate(served_of(cell, lang), lambda s: s.avoidable)


def _rate(chosen: Sequence[Served], test: Callable[[Served], bool]) -> float:
    return sum(test(s) for s in chosen) / len(chosen) if chosen else 0.0
