"""``python -m bench.openai_door``: what the OpenAI door costs over the native one.

The same question asked through the native route (``generateContent``) and through the
OpenAI-compatible one (``chat/completions``), at c=64, side by side in one run
(``bench.variants``: two gateways of the default configuration, each measured while the
other idles, the order rotating each round). The figure of merit is the gateway's CPU time
per request (far less sensitive to what else the machine does than req/s); the goal is
at most 15% more through the OpenAI door. Everything it starts, it stops.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import orjson

from bench.variants import Load, Variant, compare

__all__ = ["main"]

CONNECTIONS = 64
# The native request's question, as an OpenAI client asks it.
OPENAI_BODY = orjson.dumps(
    {
        "model": "gemini-2.5-flash",
        # The Gemini door's question, with the place for each request's reference.
        "messages": [
            {"role": "user", "content": "Explain how AI works in a few words (ref {ref})"}
        ],
    }
)
DOORS = (
    Variant("native"),
    Variant("openai", path="/v1beta/openai/chat/completions", body=OPENAI_BODY, bearer=True),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print one line per round and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    load = Load(f"c{CONNECTIONS}", CONNECTIONS, args.duration)
    with tempfile.TemporaryDirectory(prefix="localgate-bench-openai-") as raw:
        found = compare(DOORS, [load], rounds=args.rounds, warmup_s=args.warmup, workdir=Path(raw))
    native, openai = found["native", load.name], found["openai", load.name]
    print(
        f"median gateway CPU per request at c={CONNECTIONS}: native {native.cpu_us:.0f} µs, "
        f"openai {openai.cpu_us:.0f} µs (+{100 * (openai.cpu_us / native.cpu_us - 1):.1f}%; "
        f"goal ≤ +15%); req/s native {native.rps:.0f}, openai {openai.rps:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
