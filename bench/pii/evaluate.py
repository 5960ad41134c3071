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
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
import venv
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from bench.machine import describe_machine
from bench.pii.generate import CORPUS, ENTITY_TYPES, load_corpus

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

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PRESIDIO_VENV = HERE / ".venv-presidio"
PRESIDIO_REQUIREMENT = "presidio-analyzer==2.2.366"
LOCALGATE_BIN = ROOT / ".venv" / "bin" / "localgate"

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

# The two localgate engines timed: the default (names on) is what the gateway runs.
DEFAULT_ENGINE = "Detector.builtin()"
PATTERN_ENGINE = "builtin(names=False)"


def corpus_label(engine: str) -> str:
    """Throughput label: ``engine`` on the corpus itself."""
    return f"API, {engine}, best pass"


def prose_label(engine: str) -> str:
    """Throughput label: ``engine`` on prose with a record per 4 KB (the "mixed text")."""
    return f"API, {engine}, prose with a record per 4 KB"


def prompt_label(engine: str, cpu: bool = False) -> str:
    """Latency label: ``RedactionSession.redact`` on 2 KB prompts, wall clock or CPU time."""
    return f"redact() 2 KB prompt (prose + 2 records), {engine}" + (", CPU time" if cpu else "")


# Presidio entity -> the localgate types it may stand for. A prediction is resolved to the
# type of the gold span it matches (exactly, else by overlap), else to the first type here.
PRESIDIO_TYPES: dict[str, tuple[str, ...]] = {
    "PHONE_NUMBER": ("CN_MOBILE", "CN_LANDLINE"),
    "EMAIL_ADDRESS": ("EMAIL",),
    "IP_ADDRESS": ("IPV4", "IPV6"),
    "CREDIT_CARD": ("CREDIT_CARD", "CN_BANK_CARD"),
    "US_SSN": ("US_SSN",),
    "IBAN_CODE": ("IBAN",),
    "PERSON": ("PERSON",),
    "LOCATION": ("CN_ADDRESS",),
    "US_PASSPORT": ("CN_PASSPORT",),
}


class Prediction(NamedTuple):
    start: int
    end: int
    types: tuple[str, ...]  # candidate types; one for localgate, several for some Presidio


class Span(NamedTuple):
    start: int
    end: int
    type: str


def _overlaps(a_start: int, a_end: int, b_start: int, b_end: int) -> bool:
    return a_start < b_end and b_start < a_end


# --- Detectors -----------------------------------------------------------------------------


@dataclass
class DetectorRun:
    name: str
    predictions: dict[str, list[Prediction]]
    dropped: Counter[str] = field(default_factory=Counter)  # unmapped types, by name
    dropped_on_hard_negatives: int = 0
    throughput: dict[str, float] = field(default_factory=dict)  # label -> MB/s
    latency: dict[str, tuple[float, float]] = field(default_factory=dict)  # label -> p50, p99 ms
    notes: list[str] = field(default_factory=list)


def _jsonl(records: Sequence[dict[str, Any]]) -> str:
    lines = (json.dumps({"id": r["id"], "text": r["text"]}, ensure_ascii=False) for r in records)
    return "\n".join(lines) + "\n"


def _corpus_mb(records: Sequence[dict[str, Any]]) -> float:
    return sum(len(r["text"].encode()) for r in records) / 1e6


def localgate_cli_available(binary: Path = LOCALGATE_BIN) -> bool:
    if not binary.exists():
        return False
    try:
        help_text = subprocess.run(
            [str(binary), "redact", "--help"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return help_text.returncode == 0 and "--detect-jsonl" in help_text.stdout


def _git_state() -> str:
    """``<short sha>`` of HEAD, plus ``+dirty(src)`` when src/ has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
    except OSError:
        return "unknown"
    return head + ("+dirty(src)" if dirty else "")


def _load_localgate_detector() -> Any | None:
    """``localgate.redaction.detector.Detector`` if it exists yet, else None."""
    try:
        module = importlib.import_module("localgate.redaction.detector")
    except ImportError:
        return None
    return getattr(module, "Detector", None)


def _typed(raw: Iterable[dict[str, Any]]) -> list[Prediction]:
    return [Prediction(int(e["start"]), int(e["end"]), (str(e["type"]),)) for e in raw]


def run_localgate(
    records: Sequence[dict[str, Any]], via: str, repeat_seconds: float, latency_rounds: int = 200
) -> DetectorRun:
    run = DetectorRun("localgate", {})
    run.notes.append(f"localgate at git {_git_state()}")
    mb = _corpus_mb(records)
    detector_cls = _load_localgate_detector()
    cli = localgate_cli_available()
    if via == "auto":
        via = "cli" if cli else "api"
    if via == "cli":
        if not cli:
            raise RuntimeError("`localgate redact --detect-jsonl` is not available yet")
        started = time.perf_counter()
        proc = subprocess.run(
            [str(LOCALGATE_BIN), "redact", "--detect-jsonl"],
            input=_jsonl(records),
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=ROOT,
        )
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"localgate CLI failed ({proc.returncode}): {proc.stderr[-2000:]}")
        for line in proc.stdout.splitlines():
            if line.strip():
                row = json.loads(line)
                run.predictions[str(row["id"])] = _typed(row.get("entities", []))
        missing = [r["id"] for r in records if r["id"] not in run.predictions]
        if missing:
            run.notes.append(f"CLI returned no line for {len(missing)} records, e.g. {missing[:3]}")
        run.throughput["CLI, whole process incl. start-up"] = mb / elapsed
        run.notes.append("findings scored from the CLI (`localgate redact --detect-jsonl`)")
    if detector_cls is None:
        run.notes.append("localgate.redaction.detector.Detector not importable: no API timing")
        if via == "api":
            raise RuntimeError("neither the localgate CLI nor its Python API is available")
        return run
    for engine, kwargs in ((DEFAULT_ENGINE, {}), (PATTERN_ENGINE, {"names": False})):
        try:
            detector = detector_cls.builtin(**kwargs)
        except TypeError as error:  # names= not supported (yet)
            run.notes.append(f"Detector.builtin({kwargs}) failed: {error}")
            continue
        found, seconds = _time_api(detector.detect, records, repeat_seconds)
        run.throughput[corpus_label(engine)] = mb / seconds
        if via == "api" and not kwargs:
            run.predictions = found
            run.notes.append("findings scored from the Python API (`Detector.builtin().detect`)")
        _time_beyond_corpus(run, detector, records, engine, repeat_seconds, latency_rounds)
    return run


# Filler for the speed runs beyond the corpus: business prose without personal data.
_PROSE = (
    "本季度的客户满意度调查显示，大部分用户对新版本的界面设计表示认可，但也有不少人反映加载速度偏慢。"
    "产品团队计划在下个迭代中优化首页的渲染流程，并与运维部门一起排查缓存策略的问题。"
    "市场部建议在春节前推出限时优惠活动，以提升老客户的复购率，同时控制获客成本。\n",
    "The quarterly review showed that most customers like the new dashboard, although several "
    "teams asked for faster exports and better search. Engineering will focus on query latency "
    "next sprint, while the support team prepares a short guide for common questions.\n",
)


def _with_records(records: Sequence[dict[str, Any]], size: int, every: int, first: int) -> str:
    """``size`` bytes of prose, Chinese and English in turn, with a corpus record (taken
    from ``first`` on, every seventh) after each ``every`` bytes of prose."""
    pieces: list[str] = []
    total = since = 0
    turn = 0
    while total < size:
        if since >= every:
            piece = records[first % len(records)]["text"] + "\n"
            first += 7
            since = 0
        else:
            piece = _PROSE[turn % 2]
            turn += 1
            since += len(piece.encode())
        pieces.append(piece)
        total += len(piece.encode())
    # Cut back to ``size`` bytes on a character boundary.
    return "".join(pieces).encode()[:size].decode(errors="ignore")


def _time_beyond_corpus(
    run: DetectorRun,
    detector: Any,
    records: Sequence[dict[str, Any]],
    name: str,
    seconds: float,
    rounds: int,
) -> None:
    """Throughput on sparse prose, and the latency the redaction stage adds for 2 KB."""
    prose = [_with_records(records, 64_000, 4_000, first) for first in range(8)]
    _, best = _time_api(detector.detect, [{"id": "", "text": t} for t in prose], seconds)
    run.throughput[prose_label(name)] = len(prose) * 64_000 / 1e6 / best
    try:
        from localgate.config import RedactionSettings
        from localgate.redaction.session import RedactionSession
    except ImportError:
        return
    settings = RedactionSettings()

    def stage(text: str) -> None:  # what the stage does with each text of a request
        RedactionSession(settings, detector).redact(text, "contents[0].parts[0].text")

    prompts = [_with_records(records, 2048, 600, 13 * first) for first in range(64)]
    dense, current = [], ""
    for record in records:
        current += record["text"] + "\n"
        if len(current.encode()) >= 2048:
            dense.append(current.encode()[:2048].decode(errors="ignore"))
            current = ""
    for label, texts in (
        (prompt_label(name), prompts),
        (f"redact() 2 KB of corpus records (dense), {name}", dense),
    ):
        wall, cpu, collector = _latency(stage, texts, rounds)
        run.latency[label] = wall
        run.latency[f"{label}, CPU time"] = cpu
        run.notes.append(f"latency {label}: {collector}")


def _latency(
    call: Callable[[str], None], texts: Sequence[str], rounds: int
) -> tuple[tuple[float, float], tuple[float, float], str]:
    """p50 and p99 in ms of ``call`` on each text, ``rounds`` times (after a warm-up).

    The garbage collector runs as in production, and what it did is reported. Wall-clock
    time is what a request waits; the thread's CPU time leaves out the moments when other
    processes had the core, so the two side by side tell the code's own tail from the
    machine's.
    """
    for text in texts:
        call(text)
    pauses: list[float] = []
    started_at = [0.0]

    def watch(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            started_at[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started_at[0])

    before = [generation["collections"] for generation in gc.get_stats()]
    gc.callbacks.append(watch)
    wall, cpu = [], []
    try:
        for _ in range(rounds):
            for text in texts:
                started, started_cpu = time.perf_counter(), time.thread_time()
                call(text)
                cpu.append(time.thread_time() - started_cpu)
                wall.append(time.perf_counter() - started)
    finally:
        gc.callbacks.remove(watch)
    collections = [g["collections"] - b for g, b in zip(gc.get_stats(), before, strict=True)]
    collector = (
        f"{len(wall)} calls; gc collections by generation {collections}, "
        f"{sum(pauses) * 1000:.2f} ms in all, longest {max(pauses, default=0) * 1000:.3f} ms"
    )
    return _percentiles(wall), _percentiles(cpu), collector


def _percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 in ms."""
    samples = sorted(samples)
    return (
        samples[len(samples) // 2] * 1000,
        samples[min(len(samples) - 1, len(samples) * 99 // 100)] * 1000,
    )


def _time_api(
    detect: Callable[[str], Iterable[Any]], records: Sequence[dict[str, Any]], min_seconds: float
) -> tuple[dict[str, list[Prediction]], float]:
    """Findings of one pass, and the fastest of at least three timed passes.

    The fastest pass, not the mean: on a shared 2-core machine other processes only ever
    make a pass slower, so the minimum is the least disturbed estimate.
    """
    texts = [(r["id"], r["text"]) for r in records]
    found: dict[str, list[Prediction]] = {}
    for rid, text in texts:  # warm-up pass, also the one scored
        found[rid] = [Prediction(f.start, f.end, (str(f.type),)) for f in detect(text)]
    timings: list[float] = []
    while len(timings) < 3 or (sum(timings) < min_seconds and len(timings) < 50):
        started = time.perf_counter()
        for _, text in texts:
            list(detect(text))
        timings.append(time.perf_counter() - started)
    return found, min(timings)


def ensure_presidio_venv(
    path: Path = PRESIDIO_VENV, requirement: str = PRESIDIO_REQUIREMENT
) -> Path:
    """Create Presidio's own venv (once) and install presidio-analyzer from PyPI into it.

    Kept apart from the project's venv so Presidio's dependencies (spaCy, its pins) never
    touch localgate's. Only pip talks to the network, and only here; nothing is downloaded
    while the benchmark runs.
    """
    python = path / "bin" / "python"
    marker = path / ".installed"
    if marker.exists() and marker.read_text().strip() == requirement:
        return python
    if not python.exists():
        venv.EnvBuilder(with_pip=True).create(path)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            requirement,
        ],
        check=True,
    )
    marker.write_text(requirement + "\n")
    return python


def run_presidio(records: Sequence[dict[str, Any]], cn_phone: bool = True) -> DetectorRun:
    try:
        python = ensure_presidio_venv()
    except subprocess.CalledProcessError as error:
        why = f"pip exited with status {error.returncode}; its output is in the run's log"
        raise RuntimeError(f"could not install {PRESIDIO_REQUIREMENT}: {why}") from error
    except OSError as error:
        raise RuntimeError(f"could not create Presidio's venv: {error}") from error
    args = [str(python), str(HERE / "presidio_runner.py")]
    if not cn_phone:
        args.append("--no-cn-phone")
    env = {**os.environ, "TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS": "", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        args, input=_jsonl(records), capture_output=True, text=True, timeout=3600, env=env
    )
    if proc.returncode != 0:
        raise RuntimeError(f"presidio runner failed: {proc.stderr[-3000:]}")
    run = DetectorRun("presidio", {})
    meta: dict[str, Any] = {}
    raw: dict[str, list[dict[str, Any]]] = {}
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if "_meta" in row:
            meta = row["_meta"]
        else:
            raw[str(row["id"])] = row["entities"]
    by_id = {r["id"]: r for r in records}
    for rid, entities in raw.items():
        kept: list[Prediction] = []
        negatives = by_id[rid].get("hard_negatives", [])
        for e in entities:
            types = PRESIDIO_TYPES.get(e["type"])
            if types is None:
                run.dropped[e["type"]] += 1
                if any(_overlaps(e["start"], e["end"], n["start"], n["end"]) for n in negatives):
                    run.dropped_on_hard_negatives += 1
                continue
            kept.append(Prediction(int(e["start"]), int(e["end"]), types))
        run.predictions[rid] = kept
    run.throughput["in-process, analyze() only, best of 2"] = _corpus_mb(records) / meta.get(
        "seconds", 1.0
    )
    run.notes.append(
        f"presidio-analyzer {meta.get('version')}, NLP engine spacy.blank('en') (no NER), "
        f"phone regions + CN: {meta.get('cn_phone')}; "
        f"recognizers: {', '.join(meta.get('recognizers', []))}"
    )
    return run


_NAIVE = {
    "CN_MOBILE": r"\b1[3-9]\d{9}\b",
    "CN_RESIDENT_ID": r"\b\d{17}[\dXx]\b",
    "CN_BANK_CARD": r"\b62\d{14,17}\b",
    "CREDIT_CARD": r"\b(?:4\d{15}|5[1-5]\d{14}|3[47]\d{13})\b",
    "EMAIL": r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b",
    "IPV4": r"\b(?:\d{1,3}\.){3}\d{1,3}\b",
    "US_SSN": r"\b\d{3}-\d{2}-\d{4}\b",
    "IBAN": r"\b[A-Z]{2}\d{2}[A-Z0-9]{11,30}\b",
    "API_SECRET": r"\b(?:AKIA[A-Z0-9]{16}|AIza[\w-]{35}|sk-[\w-]{20,}|ghp_\w{36})\b",
}


def run_regex(records: Sequence[dict[str, Any]], repeat_seconds: float) -> DetectorRun:
    """A naive detector of the kind the reference warns about (``\\b``, ``\\w``)."""
    patterns = [(t, re.compile(p)) for t, p in _NAIVE.items()]

    def detect(text: str) -> list[Span]:
        return [Span(m.start(), m.end(), t) for t, p in patterns for m in p.finditer(text)]

    run = DetectorRun("regex", {})
    run.predictions, seconds = _time_api(detect, records, repeat_seconds)
    run.throughput["in-process, best pass"] = _corpus_mb(records) / seconds
    return run


# --- Scoring -------------------------------------------------------------------------------


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
            if g.type in pred.types and _overlaps(pred.start, pred.end, g.start, g.end):
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
            if any(p.type == g.type and _overlaps(p.start, p.end, g.start, g.end) for p in preds):
                overlap[g.type].tp += 1
            else:
                overlap[g.type].fn += 1
                near = [p for p in preds if _overlaps(p.start, p.end, g.start, g.end)]
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
                g for g in gold if g.type == p.type and _overlaps(p.start, p.end, g.start, g.end)
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
            hit = [n for n in negatives if _overlaps(p.start, p.end, n["start"], n["end"])]
            other = [g for g in gold if _overlaps(p.start, p.end, g.start, g.end)]
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
            if any(_overlaps(p.start, p.end, n["start"], n["end"]) for p in preds):
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


# --- Reporting -----------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


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
    print(f"corpus: {len(records)} records, {_corpus_mb(records):.3f} MB UTF-8 ({args.corpus})")
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
        # Imported here: the report module builds on this one's types and tables.
        from bench.pii.report import render_report

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
