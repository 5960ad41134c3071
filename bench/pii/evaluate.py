"""Score PII detectors against the labelled corpus (``bench/pii/corpus.jsonl``).

    .venv/bin/python -m bench.pii.evaluate [--detectors localgate,presidio,regex]
        [--failures N] [--markdown] [--json PATH] [--out docs/benchmarks-redaction.md]

Detectors:

``localgate``
    ``.venv/bin/localgate redact --detect-jsonl`` (one process for the whole corpus);
    throughput is also measured in-process with ``Detector.builtin()`` and
    ``Detector.builtin(names=False)``, on the corpus and on prose with a corpus record
    every 4 KB, and so is the latency of ``RedactionSession.redact`` (what the redaction
    stage does with each text) on 2 KB prompts. With ``--localgate-via api`` the API's findings are
    scored instead of the CLI's.
``presidio``
    Microsoft Presidio in its own venv (``bench/pii/.venv-presidio``, created on first use
    with pip from PyPI), run offline by ``bench/pii/presidio_runner.py``. Its entity names
    are mapped onto ours (``PRESIDIO_TYPES``); types it has no counterpart for are dropped.
``regex``
    A deliberately naive ``\\b``-based regex detector: a sanity baseline for the scorer.

Scores (see docs/redaction-quality.md): exact span-and-type micro precision/recall/F1,
overall and per type, and an overlap variant; group (a) pattern types, group (b) PERSON and
CN_ADDRESS recall, group (c) false positives on hard negatives; throughput in MB/s of UTF-8
corpus text. ``--out`` writes the whole run as a Markdown report with the issue's targets
(``bench/pii/report.py``); ``make bench`` writes ``docs/benchmarks-redaction.md`` that way.

This module is the command line. The detectors are run and timed by ``bench.pii.detectors``
(with ``bench.pii.timing``), scored by ``bench.pii.scoring`` and printed by
``bench.pii.tables``; the names in ``__all__`` are re-exported from there so that existing
``from bench.pii.evaluate import ...`` keeps working.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.machine import describe_machine
from bench.pii.detectors import (
    DEFAULT_ENGINE,
    PATTERN_ENGINE,
    PRESIDIO_REQUIREMENT,
    PRESIDIO_TYPES,
    ROOT,
    DetectorRun,
    corpus_label,
    corpus_mb,
    ensure_presidio_venv,
    prompt_label,
    prose_label,
    run_localgate,
    run_presidio,
    run_regex,
)
from bench.pii.generate import CORPUS, load_corpus
from bench.pii.report import render_report
from bench.pii.scoring import GROUP_A, GROUP_B, TARGETS, Counts, Prediction, Scores, score, summary
from bench.pii.tables import markdown_tables, print_failures, print_text

__all__ = [
    "DEFAULT_ENGINE",
    "GROUP_A",
    "GROUP_B",
    "PATTERN_ENGINE",
    "PRESIDIO_REQUIREMENT",
    "PRESIDIO_TYPES",
    "TARGETS",
    "Counts",
    "DetectorRun",
    "Prediction",
    "Scores",
    "corpus_label",
    "ensure_presidio_venv",
    "main",
    "markdown_tables",
    "prompt_label",
    "prose_label",
    "score",
]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Score PII detectors against the corpus.")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--detectors", default="localgate,presidio,regex")
    parser.add_argument("--localgate-via", choices=("auto", "cli", "api"), default="auto")
    parser.add_argument(
        "--no-cn-phone", action="store_true", help="Presidio phone regions as shipped"
    )
    parser.add_argument("--repeat-seconds", type=float, default=2.0, help="min timing per API run")
    parser.add_argument(
        "--latency-rounds", type=int, default=200, help="rounds over the 2 KB texts per latency"
    )
    parser.add_argument(
        "--failures", type=int, default=0, help="print N failure examples per class"
    )
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    parser.add_argument("--json", type=Path, help="write the scores as JSON here")
    parser.add_argument(
        "--out", type=Path, help="write the run as a Markdown report with the targets here"
    )
    parser.add_argument(
        "--entities",
        type=Path,
        help="write localgate's findings per record here (JSON), to compare two versions",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when localgate misses a target"
    )
    args = parser.parse_args(argv)
    command = shlex.join(["python", "-m", "bench.pii.evaluate", *(argv or sys.argv[1:])])
    started, clock, load_before = datetime.now(UTC), time.monotonic(), os.getloadavg()[0]

    records = load_corpus(args.corpus)
    print(f"corpus: {len(records)} records, {corpus_mb(records):.3f} MB UTF-8 ({args.corpus})")
    results: dict[str, tuple[DetectorRun, Scores]] = {}
    skipped: dict[str, str] = {}  # detector -> why it has no results
    for name in [n.strip() for n in args.detectors.split(",") if n.strip()]:
        try:
            if name == "localgate":
                run = run_localgate(
                    records, args.localgate_via, args.repeat_seconds, args.latency_rounds
                )
            elif name == "presidio":
                run = run_presidio(records, cn_phone=not args.no_cn_phone)
            elif name == "regex":
                run = run_regex(records, args.repeat_seconds)
            else:
                parser.error(f"unknown detector {name!r}")
        except RuntimeError as error:
            print(f"\n=== {name} === skipped: {error}", file=sys.stderr)
            skipped[name] = str(error)
            continue
        if not run.predictions:
            print(f"\n=== {name} === no findings to score ({'; '.join(run.notes)})")
            skipped[name] = f"no findings to score ({'; '.join(run.notes)})"
            continue
        scores = score(records, run.predictions)
        results[name] = (run, scores)
        print_text(run, scores)
        if args.failures:
            print_failures(run, scores, args.failures)
    if args.markdown and results:
        print("\n" + markdown_tables(results))
    if args.json:
        payload = {
            name: {
                "summary": summary(s),
                "throughput_mb_s": run.throughput,
                "latency_p50_p99_ms": run.latency,
                "notes": run.notes,
                "dropped": dict(run.dropped),
                "failures": [vars(f) for f in s.failures],
            }
            for name, (run, s) in results.items()
        }
        args.json.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    if args.out:
        report = render_report(
            command=command,
            via_make="MAKELEVEL" in os.environ,
            machine=describe_machine(ROOT),
            load=(load_before, os.getloadavg()[0]),
            niceness=os.nice(0),
            started=started,
            took_s=time.monotonic() - clock,
            records=records,
            results=results,
            skipped=skipped,
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    if args.entities and "localgate" in results:
        found = results["localgate"][0].predictions
        entities = {rid: [[p.start, p.end, *p.types] for p in found[rid]] for rid in sorted(found)}
        args.entities.write_text(json.dumps(entities, ensure_ascii=False, indent=0) + "\n")
    if args.check and "localgate" in results:
        s = results["localgate"][1]
        ok = (
            s.micro(GROUP_A).f1 >= TARGETS["group_a_f1"]
            and all(s.exact.get(t, Counts()).recall >= TARGETS["group_b_recall"] for t in GROUP_B)
            and s.hn_span_rate <= TARGETS["hard_negative_fp"]
        )
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
