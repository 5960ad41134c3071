"""Scoring against the gold spans: exact and overlap counts per type, hard negatives, failures.

A detector's findings (``Prediction``) are matched to the corpus's labelled entities (``Span``)
by ``score``; ``summary`` turns the result into the JSON the evaluator writes. The type groups
and issue 3's targets that the scores and the run's timings are judged against live here too.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from bench.pii.generate import ENTITY_TYPES

__all__ = [
    "GROUP_A",
    "GROUP_B",
    "TARGETS",
    "Counts",
    "Failure",
    "Prediction",
    "Scores",
    "Span",
    "overlaps",
    "score",
    "summary",
]

GROUP_A = (
    "CN_RESIDENT_ID",
    "CN_BANK_CARD",
    "CN_USCC",
    "CREDIT_CARD",
    "IBAN",
    "HK_ID",
    "TW_ID",
    "CN_MOBILE",
    "EMAIL",
    "IPV4",
    "IPV6",
    "US_SSN",
    "API_SECRET",
)
GROUP_B = ("PERSON", "CN_ADDRESS")
TARGETS = {
    "group_a_f1": 0.97,
    "group_b_recall": 0.85,
    "hard_negative_fp": 0.01,
    "mixed_text_mb_s": 20.0,  # pattern types, prose with a record per 4 KB
    "prompt_p99_ms": 0.5,  # what the redaction stage adds for a 2 KB prompt
    "presidio_ratio": 50.0,  # times Presidio's throughput in the same run
}


class Prediction(NamedTuple):
    start: int
    end: int
    types: tuple[str, ...]  # candidate types; one for localgate, several for some Presidio


class Span(NamedTuple):
    start: int
    end: int
    type: str


def overlaps(a_start: int, a_end: int, b_start: int, b_end: int) -> bool:
    return a_start < b_end and b_start < a_end


@dataclass
class Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def add(self, other: Counts) -> None:
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn

    def as_dict(self) -> dict[str, float]:
        return {
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "f1": round(self.f1, 4),
        }


@dataclass
class Failure:
    record: str
    category: str  # missed | boundary | wrong_type | hard_negative | spurious
    type: str
    value: str
    context: str
    detail: str = ""


@dataclass
class Scores:
    exact: dict[str, Counts]
    overlap: dict[str, Counts]
    hn_spans: int
    hn_hits: int
    hn_records: int
    hn_records_hit: int
    only_hn_records: int
    only_hn_records_any: int
    hn_hits_by_kind: Counter[str]
    failures: list[Failure]

    def micro(self, types: Iterable[str], overlap: bool = False) -> Counts:
        table = self.overlap if overlap else self.exact
        total = Counts()
        for t in types:
            total.add(table.get(t, Counts()))
        return total

    @property
    def hn_span_rate(self) -> float:
        return self.hn_hits / self.hn_spans if self.hn_spans else 0.0

    @property
    def hn_record_rate(self) -> float:
        return self.hn_records_hit / self.hn_records if self.hn_records else 0.0


def _resolve(pred: Prediction, gold: Sequence[Span]) -> Span:
    """Pick the candidate type of the gold span the prediction matches, if any."""
    if len(pred.types) > 1:
        for g in gold:
            if g.type in pred.types and (g.start, g.end) == (pred.start, pred.end):
                return Span(pred.start, pred.end, g.type)
        for g in gold:
            if g.type in pred.types and overlaps(pred.start, pred.end, g.start, g.end):
                return Span(pred.start, pred.end, g.type)
    return Span(pred.start, pred.end, pred.types[0])


def _context(text: str, start: int, end: int, width: int = 30) -> str:
    left = text[max(0, start - width) : start]
    right = text[end : end + width]
    return f"{left}⟦{text[start:end]}⟧{right}".replace("\n", "⏎")


def score(records: Sequence[dict[str, Any]], predictions: dict[str, list[Prediction]]) -> Scores:
    exact: dict[str, Counts] = defaultdict(Counts)
    overlap: dict[str, Counts] = defaultdict(Counts)
    failures: list[Failure] = []
    hn_spans = hn_hits = hn_records = hn_records_hit = only_hn = only_hn_any = 0
    hn_by_kind: Counter[str] = Counter()
    for record in records:
        text = record["text"]
        gold = [Span(e["start"], e["end"], e["type"]) for e in record["entities"]]
        negatives = record.get("hard_negatives", [])
        preds = sorted({_resolve(p, gold) for p in predictions.get(record["id"], [])})
        gold_set = set(gold)
        pred_set = set(preds)
        for g in gold:
            if g in pred_set:
                exact[g.type].tp += 1
            else:
                exact[g.type].fn += 1
            if any(p.type == g.type and overlaps(p.start, p.end, g.start, g.end) for p in preds):
                overlap[g.type].tp += 1
            else:
                overlap[g.type].fn += 1
                near = [p for p in preds if overlaps(p.start, p.end, g.start, g.end)]
                failures.append(
                    Failure(
                        record["id"],
                        "wrong_type" if near else "missed",
                        g.type,
                        text[g.start : g.end],
                        _context(text, g.start, g.end),
                        ", ".join(f"{p.type} {text[p.start : p.end]!r}" for p in near),
                    )
                )
        for p in preds:
            if p in gold_set:
                continue
            exact[p.type].fp += 1
            same = [
                g for g in gold if g.type == p.type and overlaps(p.start, p.end, g.start, g.end)
            ]
            if same:  # counted as a hit by the overlap variant
                failures.append(
                    Failure(
                        record["id"],
                        "boundary",
                        p.type,
                        text[p.start : p.end],
                        _context(text, p.start, p.end),
                        f"gold {text[same[0].start : same[0].end]!r}",
                    )
                )
                continue
            overlap[p.type].fp += 1
            hit = [n for n in negatives if overlaps(p.start, p.end, n["start"], n["end"])]
            other = [g for g in gold if overlaps(p.start, p.end, g.start, g.end)]
            if hit:
                category, detail = "hard_negative", ", ".join(n["kind"] for n in hit)
            elif other:
                category, detail = "wrong_type", ", ".join(f"gold {g.type}" for g in other)
            else:
                category, detail = "spurious", ""
            failures.append(
                Failure(
                    record["id"],
                    category,
                    p.type,
                    text[p.start : p.end],
                    _context(text, p.start, p.end),
                    detail,
                )
            )
        # (c) hard negatives: a span is hit when any reported entity overlaps it.
        record_hit = False
        for n in negatives:
            hn_spans += 1
            if any(overlaps(p.start, p.end, n["start"], n["end"]) for p in preds):
                hn_hits += 1
                hn_by_kind[n["kind"]] += 1
                record_hit = True
        if negatives:
            hn_records += 1
            hn_records_hit += record_hit
            if not gold:
                only_hn += 1
                only_hn_any += bool(preds)
    return Scores(
        dict(exact),
        dict(overlap),
        hn_spans,
        hn_hits,
        hn_records,
        hn_records_hit,
        only_hn,
        only_hn_any,
        hn_by_kind,
        failures,
    )


def summary(scores: Scores) -> dict[str, Any]:
    a = scores.micro(GROUP_A)
    a_overlap = scores.micro(GROUP_A, overlap=True)
    every = scores.micro(ENTITY_TYPES)
    every_overlap = scores.micro(ENTITY_TYPES, overlap=True)
    return {
        "overall_exact": every.as_dict(),
        "overall_overlap": every_overlap.as_dict(),
        "group_a_exact": a.as_dict(),
        "group_a_overlap": a_overlap.as_dict(),
        "group_b": {
            t: {
                "recall_exact": round(scores.exact.get(t, Counts()).recall, 4),
                "recall_overlap": round(scores.overlap.get(t, Counts()).recall, 4),
                "precision_exact": round(scores.exact.get(t, Counts()).precision, 4),
            }
            for t in GROUP_B
        },
        "hard_negatives": {
            "spans": scores.hn_spans,
            "spans_hit": scores.hn_hits,
            "span_rate": round(scores.hn_span_rate, 4),
            "records": scores.hn_records,
            "records_hit": scores.hn_records_hit,
            "record_rate": round(scores.hn_record_rate, 4),
            "only_hn_records": scores.only_hn_records,
            "only_hn_records_with_any_finding": scores.only_hn_records_any,
            "hits_by_kind": dict(scores.hn_hits_by_kind.most_common()),
        },
        "per_type_exact": {t: scores.exact.get(t, Counts()).as_dict() for t in ENTITY_TYPES},
        "per_type_overlap": {t: scores.overlap.get(t, Counts()).as_dict() for t in ENTITY_TYPES},
    }
