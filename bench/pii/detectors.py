"""The detectors the evaluator scores: localgate, Microsoft Presidio and a naive regex.

Each ``run_*`` returns a ``DetectorRun``: the findings per record, plus whatever was timed
(throughput in MB/s and latency percentiles, under the labels built by ``corpus_label``,
``prose_label`` and ``prompt_label``) and notes on how the run went.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import time
import venv
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.pii.scoring import Prediction, Span, overlaps
from bench.pii.timing import measure_latency, time_api, with_records

__all__ = [
    "DEFAULT_ENGINE",
    "LOCALGATE_BIN",
    "PATTERN_ENGINE",
    "PRESIDIO_REQUIREMENT",
    "PRESIDIO_TYPES",
    "PRESIDIO_VENV",
    "ROOT",
    "DetectorRun",
    "corpus_label",
    "corpus_mb",
    "ensure_presidio_venv",
    "localgate_cli_available",
    "prompt_label",
    "prose_label",
    "run_localgate",
    "run_presidio",
    "run_regex",
]

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PRESIDIO_VENV = HERE / ".venv-presidio"
PRESIDIO_REQUIREMENT = "presidio-analyzer==2.2.366"
LOCALGATE_BIN = ROOT / ".venv" / "bin" / "localgate"

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


def corpus_mb(records: Sequence[dict[str, Any]]) -> float:
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
    mb = corpus_mb(records)
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
        found, seconds = time_api(detector.detect, records, repeat_seconds)
        run.throughput[corpus_label(engine)] = mb / seconds
        if via == "api" and not kwargs:
            run.predictions = found
            run.notes.append("findings scored from the Python API (`Detector.builtin().detect`)")
        _time_beyond_corpus(run, detector, records, engine, repeat_seconds, latency_rounds)
    return run


def _time_beyond_corpus(
    run: DetectorRun,
    detector: Any,
    records: Sequence[dict[str, Any]],
    name: str,
    seconds: float,
    rounds: int,
) -> None:
    """Throughput on sparse prose, and the latency the redaction stage adds for 2 KB."""
    prose = [with_records(records, 64_000, 4_000, first) for first in range(8)]
    _, best = time_api(detector.detect, [{"id": "", "text": t} for t in prose], seconds)
    run.throughput[prose_label(name)] = len(prose) * 64_000 / 1e6 / best
    try:
        from localgate.config import RedactionSettings
        from localgate.redaction.session import RedactionSession
    except ImportError:
        return
    settings = RedactionSettings()

    def stage(text: str) -> None:  # what the stage does with each text of a request
        RedactionSession(settings, detector).redact(text, "contents[0].parts[0].text")

    prompts = [with_records(records, 2048, 600, 13 * first) for first in range(64)]
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
        wall, cpu, collector = measure_latency(stage, texts, rounds)
        run.latency[label] = wall
        run.latency[f"{label}, CPU time"] = cpu
        run.notes.append(f"latency {label}: {collector}")


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
                if any(overlaps(e["start"], e["end"], n["start"], n["end"]) for n in negatives):
                    run.dropped_on_hard_negatives += 1
                continue
            kept.append(Prediction(int(e["start"]), int(e["end"]), types))
        run.predictions[rid] = kept
    run.throughput["in-process, analyze() only, best of 2"] = corpus_mb(records) / meta.get(
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
    run.predictions, seconds = time_api(detect, records, repeat_seconds)
    run.throughput["in-process, best pass"] = corpus_mb(records) / seconds
    return run
