"""CPU per detection, in process: the PII-dense prompt and the redaction corpus.

    .venv/bin/python -m bench.detection [--rounds 5] [--seconds 0.5] [--profile N]
        [--instructions]

Prints the CPU time (``time.process_time``: what this process ran, not what it waited
for) of ``Detector.builtin().detect`` per call on the text of ``bench/pii/dense_body.json``
(a ~1.5 KB customer-service prompt mixing Chinese and English, dense with identifiers,
names and addresses) and per pass over ``bench/pii/corpus.jsonl``: the best of several
rounds, which leaves out most of what other processes on a loaded machine take from this
one. Then the same split by recognizer (each recognizer's ``find``, timed call by call,
the least of the rounds; the rest — reading encodings, width folding, the prefilter
pass, overlap resolution — is the difference, and carries the error of taking the CPU
clock's own cost off each call: a few us either way on a loaded machine).
``--profile N`` adds cProfile's N most expensive functions on the prompt.
``--instructions`` counts instructions under callgrind instead (load-independent; needs
valgrind): the difference between two runs of different lengths, per detection of the
prompt, per pass over the corpus and per pass over the PII evaluator's 64 2 KB prompts.

To compare two versions, run the same command against each source tree, side by side:
``PYTHONPATH=/path/to/other/src python -m bench.detection``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from localgate.redaction.detector import Detector
from localgate.redaction.findings import Finding

__all__ = ["BODY", "Timed", "corpus_texts", "dense_text", "main"]

HERE = Path(__file__).resolve().parent
BODY = HERE / "pii" / "dense_body.json"
CORPUS = HERE / "pii" / "corpus.jsonl"


def dense_text(path: Path = BODY) -> str:
    """The prompt text of the PII-dense request body."""
    body = json.loads(path.read_text(encoding="utf-8"))
    return "".join(part["text"] for part in body["contents"][0]["parts"])


def corpus_texts(path: Path = CORPUS) -> list[str]:
    """The text of every corpus record."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle if line.strip()]


class Timed:
    """A recognizer whose ``find`` calls are timed (CPU, ns) into ``spent[label]``."""

    def __init__(
        self, recognizer: Any, label: str, spent: dict[str, int], calls: dict[str, int]
    ) -> None:
        self._recognizer = recognizer
        self._label = label
        self._spent = spent
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        # The detector reads prefilter and context_gate off each recognizer.
        return getattr(self._recognizer, name)

    def find(self, scan: Any) -> list[Finding]:
        """The recognizer's findings, its CPU time added to its label."""
        clock = time.process_time_ns
        started = clock()
        found = list(self._recognizer.find(scan))
        label = self._label
        self._spent[label] = self._spent.get(label, 0) + clock() - started
        self._calls[label] = self._calls.get(label, 0) + 1
        return found


class _Nothing:
    def find(self, scan: Any) -> tuple[()]:
        return ()


def _labels(recognizers: Sequence[Any]) -> list[str]:
    labels: list[str] = []
    seen: dict[str, int] = defaultdict(int)
    for recognizer in recognizers:
        name = getattr(recognizer, "type", None) or type(recognizer).__name__
        if type(recognizer).__name__ == "NameRecognizer":
            name = "PERSON+CN_ADDRESS (names)"
        seen[name] += 1
        labels.append(f"{name} #{seen[name]}" if seen[name] > 1 else name)
    return labels


def _cpu_per_call(call: Callable[[], object], seconds: float, rounds: int) -> float:
    """CPU seconds per call: the best round of at least ``seconds`` of CPU each."""
    call()
    calls = 1
    while True:  # calibrate: how many calls make a round
        started = time.process_time()
        for _ in range(calls):
            call()
        took = time.process_time() - started
        if took >= seconds / 4:
            break
        calls *= 2
    calls = max(1, int(calls * seconds / max(took, 1e-9)))
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(calls):
            call()
        best = min(best, (time.process_time() - started) / calls)
    return best


def _split(detector: Detector, texts: Iterable[str], repeat: int) -> dict[str, float]:
    """CPU ns per pass over ``texts`` by recognizer, and the rest; the least of ``repeat``
    rounds.

    Reading the CPU clock is a system call (1.4 us here, more than many a recognizer's
    call): what a timed call of a recognizer that does nothing measures is taken off every
    call, and the rest is the untimed detector's time less the recognizers'.
    """
    spent: dict[str, int] = defaultdict(int)
    calls: dict[str, int] = defaultdict(int)
    recognizers = detector.recognizers
    labels = _labels(recognizers)
    timed = Detector(
        [Timed(r, label, spent, calls) for r, label in zip(recognizers, labels, strict=True)],
        detector.min_score,
    )
    nothing = Timed(_Nothing(), "nothing", spent, calls)
    texts = list(texts)
    least: dict[str, float] = {}
    for _ in range(repeat):
        spent.clear()
        calls.clear()
        for _ in range(1000):
            nothing.find(None)
        overhead = spent.pop("nothing") / calls.pop("nothing")
        started = time.process_time_ns()
        for text in texts:
            detector.detect(text)
        total = time.process_time_ns() - started
        for text in texts:
            timed.detect(text)
        corrected = {label: ns - calls[label] * overhead for label, ns in spent.items()}
        corrected[_REST] = total - sum(corrected.values())
        for label, ns in corrected.items():
            least[label] = min(least.get(label, float("inf")), ns)
    return least


_REST = "other (reveal, fold, prefilters, resolve)"


def _print_split(title: str, split: dict[str, float], per: float, unit: str) -> None:
    print(f"\n{title}")
    for label, ns in sorted(split.items(), key=lambda item: -item[1]):
        if ns / per >= 0.05 or label == _REST:
            print(f"  {label:<44} {ns / per:>9.1f} {unit}")


def _instructions(iterations: int, which: str) -> int:
    """Instructions callgrind counts for a run of ``iterations`` detections."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "bench.detection",
                "--loop",
                str(iterations),
                "--which",
                which,
            ],
            check=True,
            capture_output=True,
        )
        found = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
        if found is None:
            raise RuntimeError("callgrind wrote no instruction total")
        return int(found.group(1))


def prompt_texts() -> list[str]:
    """The PII evaluator's 64 prompts: 2 KB of prose, Chinese and English in turn, with a
    corpus record after each 600 bytes."""
    from bench.pii.generate import load_corpus
    from bench.pii.timing import with_records

    records = load_corpus(CORPUS)
    return [with_records(records, 2048, 600, 13 * first) for first in range(64)]


def _loop(iterations: int, which: str) -> None:
    detector = Detector.builtin()
    texts = {"body": [dense_text()], "corpus": corpus_texts(), "prompts": prompt_texts()}[which]
    for text in texts:  # warm: compiled patterns, the segmenter's dictionary
        detector.detect(text)
    for _ in range(iterations):
        for text in texts:
            detector.detect(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CPU per detection, in process.")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the best is reported")
    parser.add_argument("--seconds", type=float, default=0.5, help="CPU seconds per round")
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions under callgrind"
    )
    parser.add_argument("--loop", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--which", choices=("body", "corpus", "prompts"), default="body", help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.loop is not None:
        _loop(args.loop, args.which)
        return 0

    detector = Detector.builtin()
    text = dense_text()
    records = corpus_texts()
    findings = detector.detect(text)
    print(
        f"PII-dense prompt: {len(text)} characters, {len(text.encode())} bytes UTF-8, "
        f"{len(findings)} findings; corpus: {len(records)} records, "
        f"{sum(len(r.encode()) for r in records) / 1e3:.1f} KB"
    )
    if args.instructions:
        for which, short, long in (("body", 20, 120), ("corpus", 1, 3), ("prompts", 1, 3)):
            count = (_instructions(long, which) - _instructions(short, which)) / (long - short)
            unit = {"body": "per detection", "corpus": "per corpus pass"}.get(
                which, "per pass over the 64 prompts"
            )
            print(f"  {which}: {count / 1e6:.3f} M instructions {unit} (callgrind)")
        return 0

    body_cpu = _cpu_per_call(lambda: detector.detect(text), args.seconds, args.rounds)

    def corpus_pass() -> None:
        for record in records:
            detector.detect(record)

    corpus_cpu = _cpu_per_call(corpus_pass, args.seconds * 4, args.rounds)
    print(f"  prompt: {body_cpu * 1e6:.1f} us CPU per detection (best of {args.rounds} rounds)")
    print(
        f"  corpus: {corpus_cpu * 1e3:.1f} ms CPU per pass, "
        f"{corpus_cpu / len(records) * 1e6:.1f} us per record"
    )
    repeat = max(args.rounds, 3)
    calls = max(1, int(args.seconds / body_cpu))
    _print_split(
        "prompt, by recognizer (us CPU per detection)",
        _split(detector, [text] * calls, repeat),
        calls * 1e3,
        "us",
    )
    _print_split(
        "corpus, by recognizer (ms CPU per pass)", _split(detector, records, repeat), 1e6, "ms"
    )
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(lambda: [detector.detect(text) for _ in range(calls)])
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
