"""The run's results as text: the per-detector printout, failure examples, Markdown tables.

``print_text`` and ``print_failures`` are what ``bench.pii.evaluate`` prints for each
detector; ``markdown_tables`` is printed by ``--markdown`` and is the core of the
``--out`` report (``bench/pii/report.py``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping

from bench.pii.detectors import DetectorRun
from bench.pii.generate import ENTITY_TYPES
from bench.pii.scoring import GROUP_A, GROUP_B, TARGETS, Counts, Failure, Scores, summary

__all__ = ["markdown_tables", "print_failures", "print_text"]


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


_COLUMN = {"localgate": "localgate", "presidio": "Presidio (no NER)", "regex": "naive regex"}


def markdown_tables(results: Mapping[str, tuple[DetectorRun, Scores]]) -> str:
    """The two result tables of docs/redaction-quality.md, ready to paste."""
    names = list(results)
    titles = [_COLUMN.get(n, n) for n in names]
    head = "| | " + " | ".join(titles) + " | target |\n|---|" + "---:|" * (len(names) + 1) + "\n"

    def row(label: str, cell: Callable[[DetectorRun, Scores], str], target: str = "") -> str:
        cells = " | ".join(cell(*results[n]) for n in names)
        return f"| {label} | {cells} | {target} |\n"

    def prf(c: Counts) -> str:
        return f"{c.precision:.3f} / {c.recall:.3f} / **{c.f1:.3f}**"

    def recall_cell(t: str) -> Callable[[DetectorRun, Scores], str]:
        def cell(_run: DetectorRun, s: Scores) -> str:
            exact, ovl = s.exact.get(t, Counts()), s.overlap.get(t, Counts())
            return f"**{exact.recall:.3f}** / {ovl.recall:.3f}"

        return cell

    def speed_cell(label: str) -> Callable[[DetectorRun, Scores], str]:
        def cell(run: DetectorRun, _s: Scores) -> str:
            return f"{run.throughput[label]:.2f}" if label in run.throughput else "–"

        return cell

    def latency_cell(label: str) -> Callable[[DetectorRun, Scores], str]:
        def cell(run: DetectorRun, _s: Scores) -> str:
            if label not in run.latency:
                return "–"
            p50, p99 = run.latency[label]
            return f"{p50:.3f} / {p99:.3f}"

        return cell

    out = head
    out += row(
        "(a) pattern types, exact P / R / F1",
        lambda _r, s: prf(s.micro(GROUP_A)),
        f"F1 ≥ {TARGETS['group_a_f1']}",
    )
    out += row(
        "(a) pattern types, overlap P / R / F1", lambda _r, s: prf(s.micro(GROUP_A, overlap=True))
    )
    for t in GROUP_B:
        out += row(
            f"(b) {t} recall, exact / overlap", recall_cell(t), f"≥ {TARGETS['group_b_recall']}"
        )
    out += row(
        "(c) hard-negative spans hit",
        lambda _r, s: f"**{_pct(s.hn_span_rate)}** ({s.hn_hits}/{s.hn_spans})",
        f"≤ {_pct(TARGETS['hard_negative_fp'])}",
    )
    out += row(
        "(c) records with a hard negative hit",
        lambda _r, s: f"{_pct(s.hn_record_rate)} ({s.hn_records_hit}/{s.hn_records})",
    )
    out += row(
        "records without personal data that got any finding",
        lambda _r, s: f"{s.only_hn_records_any}/{s.only_hn_records}",
    )
    out += row("all types, exact P / R / F1", lambda _r, s: prf(s.micro(ENTITY_TYPES)))
    out += row(
        "all types, overlap P / R / F1", lambda _r, s: prf(s.micro(ENTITY_TYPES, overlap=True))
    )
    for label in sorted({label for run, _ in results.values() for label in run.throughput}):
        out += row(f"throughput MB/s: {label}", speed_cell(label))
    for label in sorted({label for run, _ in results.values() for label in run.latency}):
        out += row(f"latency p50 / p99 ms: {label}", latency_cell(label))
    out += "\n| type | gold | " + " | ".join(titles) + " |\n|---|---:|" + "---|" * len(names) + "\n"
    for t in ENTITY_TYPES:
        first = results[names[0]][1]
        gold = first.exact.get(t, Counts()).tp + first.exact.get(t, Counts()).fn
        cells = []
        for n in names:
            c = results[n][1].exact.get(t, Counts())
            o = results[n][1].overlap.get(t, Counts())
            precision = f"{c.precision:.2f}" if c.tp + c.fp else "–"
            cells.append(f"{precision} / {c.recall:.2f} / {c.f1:.2f}; {o.recall:.2f}")
        out += f"| {t} | {gold} | " + " | ".join(cells) + " |\n"
    return out


def print_text(run: DetectorRun, scores: Scores) -> None:
    s = summary(scores)
    a, b, hn = s["group_a_exact"], s["group_b"], s["hard_negatives"]
    print(f"\n=== {run.name} ===")
    for note in run.notes:
        print(f"  note: {note}")
    if run.dropped:
        print(
            f"  dropped (no localgate counterpart): {dict(run.dropped.most_common())}; "
            f"{run.dropped_on_hard_negatives} of them on hard negatives"
        )
    print(
        f"  (a) pattern types  P {a['precision']:.3f}  R {a['recall']:.3f}  F1 {a['f1']:.3f}"
        f"   [target F1 >= {TARGETS['group_a_f1']}]   overlap F1 {s['group_a_overlap']['f1']:.3f}"
    )
    for t in GROUP_B:
        print(
            f"  (b) {t:<10} recall {b[t]['recall_exact']:.3f}"
            f" (overlap {b[t]['recall_overlap']:.3f})"
            f"   [target >= {TARGETS['group_b_recall']}]"
        )
    print(
        f"  (c) hard negatives hit: {hn['spans_hit']}/{hn['spans']} spans = {_pct(hn['span_rate'])}"
        f", {hn['records_hit']}/{hn['records']} records = {_pct(hn['record_rate'])}"
        f"   [target <= {_pct(TARGETS['hard_negative_fp'])}]  by kind: {hn['hits_by_kind']}"
    )
    o = s["overall_exact"]
    print(f"  all types exact     P {o['precision']:.3f}  R {o['recall']:.3f}  F1 {o['f1']:.3f}")
    for label, value in run.throughput.items():
        print(f"  throughput {label}: {value:.2f} MB/s")
    for label, (p50, p99) in run.latency.items():
        print(f"  latency {label}: p50 {p50:.3f} ms, p99 {p99:.3f} ms")
    print(f"  {'type':<17} {'gold':>5} {'tp':>5} {'fp':>5} {'fn':>5}  P      R      F1    R(ovl)")
    for t in ENTITY_TYPES:
        c = scores.exact.get(t, Counts())
        ovl = scores.overlap.get(t, Counts())
        print(
            f"  {t:<17} {c.tp + c.fn:>5} {c.tp:>5} {c.fp:>5} {c.fn:>5}  "
            f"{c.precision:.3f}  {c.recall:.3f}  {c.f1:.3f}  {ovl.recall:.3f}"
        )


def print_failures(run: DetectorRun, scores: Scores, limit: int) -> None:
    groups: dict[tuple[str, str], list[Failure]] = defaultdict(list)
    for f in scores.failures:
        groups[f.type, f.category].append(f)
    print(f"\n--- {run.name}: failures by type and category (up to {limit} each) ---")
    for (t, category), items in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"\n[{t} / {category}] {len(items)}")
        seen: set[str] = set()
        shown = 0
        for f in items:
            key = f"{f.value}|{f.detail}"
            if key in seen:
                continue
            seen.add(key)
            detail = f"   ({f.detail})" if f.detail else ""
            print(f"  {f.record}: {f.context}{detail}")
            shown += 1
            if shown >= limit:
                break
