"""The questions: the paraphrase corpus, and the filler that fills the lookup's cache."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CORPUS",
    "CORPUS_DIR",
    "NEAR_MISS_KINDS",
    "PARAPHRASE_KINDS",
    "Question",
    "filler_questions",
    "load_corpus",
]

CORPUS_DIR = Path(__file__).resolve().parents[1] / "cache_corpus"
CORPUS = CORPUS_DIR / "questions.jsonl"
PARAPHRASE_KINDS = ("punctuation", "polite", "reorder", "synonym", "value swap")
NEAR_MISS_KINDS = ("entity", "negation", "period", "number")


@dataclass(frozen=True, slots=True)
class Question:
    """One question of the corpus: a seed, a paraphrase, a value swap or a near-miss."""

    group: str
    lang: str
    role: str  # "seed", "paraphrase" (value swaps too) or "near-miss"
    kind: str  # seed; punctuation, polite, reorder, synonym, value swap; entity, ...
    text: str


def load_corpus(path: Path) -> list[list[Question]]:
    """The question groups, each starting with its seed."""
    groups = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        name, lang = raw["group"], raw["lang"]
        group = [Question(name, lang, "seed", "seed", raw["seed"])]
        for item in raw["paraphrases"]:
            group.append(Question(name, lang, "paraphrase", item["kind"], item["text"]))
        for text in raw["value_swaps"]:
            group.append(Question(name, lang, "paraphrase", "value swap", text))
        for item in raw["near_misses"]:
            group.append(Question(name, lang, "near-miss", item["kind"], item["text"]))
        groups.append(group)
    return groups


def filler_questions(count: int, seed: int = 7) -> list[str]:
    """``count`` distinct questions, alternately English and Chinese, as redacted prompts look.

    Made from the templates in ``cache_corpus/filler.json``: a frame, filled with a
    subject, someone (sometimes a placeholder), a place and a time, after an opener.
    """
    templates = json.loads((CORPUS_DIR / "filler.json").read_text(encoding="utf-8"))
    languages = [templates["en"], templates["zh"]]
    rng = random.Random(seed)
    seen: set[str] = set()
    found: list[str] = []
    while len(found) < count:
        parts = languages[len(found) % 2]
        text = rng.choice(parts["openers"]) + rng.choice(parts["frames"]).format(
            s=rng.choice(parts["subjects"]),
            w=rng.choice(parts["who"]),
            p=rng.choice(parts["places"]),
            t=rng.choice(parts["times"]),
        )
        if text not in seen:
            seen.add(text)
            found.append(text)
    return found
