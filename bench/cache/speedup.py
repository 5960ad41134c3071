"""2. An exact hit against the upstream's delay, over HTTP, as one client sees it."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cache.gateway import Gateway, gateway_config
from bench.cache.latency import Latency
from bench.cache.options import BUILTIN, Options
from bench.cache.progress import progress
from bench.cache.prompts import ask
from bench.machine import Machine

# The series "during a write" must follow the gateway's linger, so it is taken from there.
from localgate.cache.writer import WRITE_LINGER_S as LINGER_S
from localgate.testing import FakeGemini

__all__ = ["SPEED_ROUNDS", "Speedup", "measure_speedup"]


@dataclass(frozen=True, slots=True)
class Speedup:
    """Latency seen by a client with a fixed upstream delay: misses and exact hits."""

    delay_s: float
    linger_s: float  # how long the gateway waits before writing an answer
    miss: Latency
    hit: Latency  # with the cache's store idle
    hit_after_miss: Latency  # sent as soon as a miss is answered, in that answer's linger
    hit_during_write: Latency  # sent when a miss's linger ends, as its answer is written
    miss_during_write: Latency  # a new prompt sent then: does a write hold up the gateway?
    unexpected: int
    pinned: bool


SPEED_ROUNDS = 5


def measure_speedup(
    folder: Path, upstream: FakeGemini, options: Options, machine: Machine
) -> Speedup:
    """In each round: distinct prompts (misses), one repeated prompt (exact hits), then pairs
    of a miss and a hit: sent at once, and sent as the miss's answer is written; then pairs
    of misses, the second sent as the first's answer is written."""
    progress(f"speed-up: {options.requests} of each, upstream delay {options.delay_s} s")
    upstream.reset()
    cpus = machine.usable_cpus
    plan = len(cpus) >= 2 and shutil.which("taskset") is not None
    series: dict[str, list[float]] = {
        "miss": [],
        "hit": [],
        "hit after miss": [],
        "hit during a write": [],
        "miss during a write": [],
    }
    unexpected = 0
    repeated = ask("Summarise the open IT tickets of 张伟 (13812345678) in three bullet points.")
    sent = 0  # distinct prompts so far
    # Answers the gateway said were misses: each is stored, the repeated prompt's too
    # (more than once in the warm-up, where it is asked again before its answer is
    # written).
    misses = 0

    def timed(body: dict[str, Any], expected: str, name: str | None) -> float:
        """Send ``body``; returns when the answer came (``perf_counter``)."""
        nonlocal unexpected, misses
        started = time.perf_counter()
        reply = gateway.post(body)
        answered = time.perf_counter()
        misses += reply.cache == "miss"
        if name is not None:
            series[name].append(answered - started)
            unexpected += reply.cache != expected
        return answered

    def miss(name: str | None) -> float:
        nonlocal sent
        sent += 1
        text = f"Summarise IT ticket {sent} of 张伟 (13812345678) in three bullet points."
        return timed(ask(text), "miss", name)

    with ExitStack() as stack, _affinity(cpus[:1] if plan else None):
        config = gateway_config(BUILTIN, None, options)
        gateway = Gateway(folder / "speed", config, upstream.base_url)
        gateway.start(stack, cpus[1:2] if plan else None)
        for _ in range(10):  # warm-up
            miss(None)
            timed(repeated, "", None)
        upstream.delay(options.delay_s)
        per_round = max(1, options.requests // SPEED_ROUNDS)
        for _ in range(SPEED_ROUNDS):
            for _ in range(per_round):
                miss("miss")
            gateway.wait_stored(misses)
            for _ in range(per_round):
                timed(repeated, "hit; layer=exact", "hit")
            for _ in range(per_round):
                miss(None)
                timed(repeated, "hit; layer=exact", "hit after miss")
            for _ in range(per_round):
                gateway.wait_stored(misses)  # no other answer waiting to be written
                answered = miss(None)
                # The gateway writes the answer once its linger ends (it starts just
                # before the answer is sent): the hit is sent then, to meet the write.
                time.sleep(max(0.0, answered + LINGER_S - time.perf_counter()))
                timed(repeated, "hit; layer=exact", "hit during a write")
            for _ in range(per_round):
                gateway.wait_stored(misses)
                answered = miss(None)
                time.sleep(max(0.0, answered + LINGER_S - time.perf_counter()))
                miss("miss during a write")
    upstream.delay(0)
    return Speedup(
        options.delay_s,
        LINGER_S,
        Latency.of(series["miss"]),
        Latency.of(series["hit"]),
        Latency.of(series["hit after miss"]),
        Latency.of(series["hit during a write"]),
        Latency.of(series["miss during a write"]),
        unexpected,
        plan,
    )


@contextlib.contextmanager
def _affinity(cpus: Sequence[int] | None) -> Iterator[None]:
    """Run this process (the client and the fake upstream) on ``cpus`` for a while."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
