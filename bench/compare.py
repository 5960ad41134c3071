"""``python -m bench.compare --baseline DIR``: this tree's gateway against another tree's.

Two gateways with the same configuration (``--config``, e.g. bench/configs/core.yaml): one
running the source of another checkout (``--baseline``, e.g. the main branch's worktree),
one running this tree's (the console script honours PYTHONPATH, whose ``src`` comes before
the editable install's path), measured side by side in rotating rounds by
``bench.variants``; with ``--trace`` both trace every request into a discarding OTLP
receiver. The report is the median req/s at c=64 and the median gateway CPU time per
request, which is far less sensitive than req/s to whatever else the machine runs.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from bench.run import REPO
from bench.tracing import otlp_sink
from bench.variants import Load, Variant, compare

__all__ = ["main"]

CONNECTIONS = 64


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print one line per round and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--baseline", type=Path, required=True, help="another checkout (its src/ is run)"
    )
    parser.add_argument("--config", type=Path, help="the configuration both gateways run")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="both gateways trace every request, exporting to a discarding OTLP receiver",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    baseline_src = (args.baseline / "src").resolve()
    if not (baseline_src / "localgate").is_dir():
        raise SystemExit(f"{args.baseline} has no src/localgate")
    config = args.config.read_text(encoding="utf-8") if args.config else ""
    load = Load(f"c{CONNECTIONS}", CONNECTIONS, args.duration)
    with (
        tempfile.TemporaryDirectory(prefix="localgate-bench-compare-") as raw,
        ExitStack() as stack,
    ):
        workdir = Path(raw)
        tracing: dict[str, str] = {}
        if args.trace:
            tracing, _ = stack.enter_context(otlp_sink(workdir))
        trees = {"baseline": baseline_src, "this": (REPO / "src").resolve()}
        variants = [
            Variant(name, config, env={"PYTHONPATH": str(src), **tracing})
            for name, src in trees.items()
        ]
        found = compare(variants, [load], rounds=args.rounds, warmup_s=args.warmup, workdir=workdir)
    base, this = found["baseline", load.name], found["this", load.name]
    print(
        f"median at c={CONNECTIONS}: baseline {base.rps:.0f} req/s, this {this.rps:.0f} req/s "
        f"(this/baseline {this.rps / base.rps:.3f}); gateway CPU per request: baseline "
        f"{base.cpu_us:.0f} µs, this {this.cpu_us:.0f} µs "
        f"({100 * (this.cpu_us / base.cpu_us - 1):+.1f}%)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
