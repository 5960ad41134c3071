"""The command: run the three measurements in order and write the report."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.cache.corpus import CORPUS, load_corpus
from bench.cache.gateway import REPO
from bench.cache.lookup import LookupBench
from bench.cache.options import Options, embedders, parse_args
from bench.cache.progress import progress
from bench.cache.prompts import Redactor, default_settings
from bench.cache.quality import measure_quality
from bench.cache.report import render_report
from bench.cache.speedup import measure_speedup
from bench.machine import describe_machine
from bench.servers import stopping_cleanly
from localgate.testing import FakeGemini

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the three measurements and write the report; 0 on success."""
    options = parse_args(argv)
    return stopping_cleanly(lambda: _run(options))


def _run(options: Options) -> int:
    started = datetime.now(UTC)
    clock = time.monotonic()
    machine = describe_machine(REPO)
    groups = load_corpus(CORPUS)
    with tempfile.TemporaryDirectory(prefix="localgate-cache-bench-") as name:
        folder = Path(name)
        redactor = Redactor(default_settings(folder / "defaults"))
        with FakeGemini() as upstream:
            speed = measure_speedup(folder, upstream, options, machine)
            quality = [
                measure_quality(folder, upstream, groups, redactor, embedder, threshold, options)
                for embedder in embedders(options)
                for threshold in options.thresholds
            ]
        lookups = LookupBench(folder, options, groups).run()
    report = render_report(
        options, machine, started, time.monotonic() - clock, groups, lookups, speed, quality
    )
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(report, encoding="utf-8")
    progress(f"wrote {options.out} after {(time.monotonic() - clock) / 60:.1f} min")
    return 0
