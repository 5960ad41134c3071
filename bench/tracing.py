"""``python -m bench.tracing``: what tracing costs, as req/s at c=64 with it on and off.

Starts an OTLP/HTTP receiver that discards spans (``bench.otlp_sink``) and, through
``bench.variants``, the fake upstream and two gateways: one untraced, one tracing every
request (sampler ``always_on``, exporting to the receiver in batches), measured side by
side in rotating rounds. The report is the median req/s of each, their ratio, and the
gateway CPU time per request (far less sensitive to what else the machine does).
Everything it starts, it stops.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bench.run import READY_DEADLINE_S, REPO, CpuLayout
from bench.servers import ServerProcess, clean_environment, free_ports, pinned
from bench.variants import Load, Variant, compare

__all__ = ["main", "otlp_sink"]

CONNECTIONS = 64


@contextmanager
def otlp_sink(workdir: Path) -> Iterator[tuple[dict[str, str], str]]:
    """A discarding OTLP/HTTP receiver on the load CPU: the environment that makes a
    gateway trace every request into it, and the URL that says how much it received."""
    (port,) = free_ports(1)
    layout = CpuLayout.plan(sorted(os.sched_getaffinity(0)))
    command = [sys.executable, "-m", "bench.otlp_sink", "--port", str(port)]
    sink = ServerProcess(
        "otlp-sink",
        pinned(command, layout.load),
        env=clean_environment(),
        cwd=REPO,
        log_path=workdir / "otlp-sink.log",
    )
    sink.start()
    try:
        url = f"http://127.0.0.1:{port}/"
        sink.wait_ready(lambda: _get(url) is not None, READY_DEADLINE_S)
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_TRACES_SAMPLER": "always_on",
        }
        yield env, url
    finally:
        sink.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print one line per round and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    load = Load(f"c{CONNECTIONS}", CONNECTIONS, args.duration)
    with tempfile.TemporaryDirectory(prefix="localgate-bench-tracing-") as raw:
        workdir = Path(raw)
        with otlp_sink(workdir) as (tracing, sink_url):
            found = compare(
                [Variant("off"), Variant("on", env=tracing)],
                [load],
                rounds=args.rounds,
                warmup_s=args.warmup,
                workdir=workdir,
            )
            received = _get(sink_url)
    off, on = found["off", load.name], found["on", load.name]
    print(
        f"median gateway CPU per request: off {off.cpu_us:.0f} µs, on {on.cpu_us:.0f} µs "
        f"(+{100 * (on.cpu_us / off.cpu_us - 1):.1f}%)"
    )
    print(
        f"median at c={CONNECTIONS}: tracing off {off.rps:.0f} req/s, on {on.rps:.0f} req/s; "
        f"on/off = {on.rps / off.rps:.3f} (cost {100 * (1 - on.rps / off.rps):.1f}%); "
        f"the receiver got {received}"
    )
    return 0


def _get(url: str) -> str | None:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback, fixed
        return str(response.read().decode()) if response.status == 200 else None


if __name__ == "__main__":
    raise SystemExit(main())
