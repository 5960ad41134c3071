"""What one benchmark run measured, summarised per scenario and target, and the targets.

Every (scenario, target) cell is measured once per round; a cell's figures are the
medians over its rounds, so one disturbed round does not decide the outcome.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench.wrk import WrkResult

__all__ = [
    "ADDED_LATENCY_TARGET_US",
    "THROUGHPUT_TARGET",
    "Cell",
    "Measurement",
    "Results",
    "Scenario",
    "TargetCheck",
]

DIRECT, FLOOR, LOCALGATE = "direct", "floor", "localgate"
TARGETS = (DIRECT, FLOOR, LOCALGATE)
# The targets: localgate adds at most 1 ms at p50 over calling the upstream
# directly with one connection, and keeps 70% of the floor proxy's throughput at 64.
ADDED_LATENCY_TARGET_US = 1000.0
THROUGHPUT_TARGET = 0.70


@dataclass(frozen=True, slots=True)
class Scenario:
    """One load shape: which call, how many connections, for how long."""

    key: str
    title: str
    path: str
    connections: int
    duration_s: int
    streaming: bool


@dataclass(frozen=True, slots=True)
class Measurement:
    """One wrk run against one target, with the CPU each process used meanwhile."""

    round: int
    scenario: Scenario
    target: str
    wrk: WrkResult
    proxy_cpu_s: float | None  # None for the direct target
    upstream_cpu_s: float
    other_cpu_s: float  # machine-wide busy time not used by the benchmark's processes
    wall_s: float

    @property
    def proxy_cpu_us_per_request(self) -> float | None:
        """The proxy's CPU time per completed request."""
        if self.proxy_cpu_s is None or not self.wrk.requests:
            return None
        return self.proxy_cpu_s / self.wrk.requests * 1e6

    @property
    def upstream_cpu_us_per_request(self) -> float:
        """The fake upstream's CPU time per completed request."""
        return self.upstream_cpu_s / self.wrk.requests * 1e6 if self.wrk.requests else 0.0

    @property
    def other_load_cores(self) -> float:
        """How many CPUs' worth of work other programs did during the run."""
        return max(self.other_cpu_s, 0.0) / self.wall_s if self.wall_s else 0.0

    @property
    def errors(self) -> int:
        """Socket errors plus non-2xx answers."""
        return self.wrk.socket_errors + self.wrk.non_2xx


@dataclass(frozen=True, slots=True)
class Cell:
    """All rounds of one scenario against one target."""

    scenario: Scenario
    target: str
    rounds: tuple[Measurement, ...]

    def latency_us(self, percentile: float) -> float:
        """Median over rounds of a latency percentile."""
        return statistics.median(m.wrk.latency_us[percentile] for m in self.rounds)

    @property
    def rps(self) -> float:
        """Median requests per second over rounds."""
        return statistics.median(m.wrk.rps for m in self.rounds)

    @property
    def rps_range(self) -> tuple[float, float]:
        """Lowest and highest requests per second of a round."""
        values = [m.wrk.rps for m in self.rounds]
        return min(values), max(values)

    @property
    def proxy_cpu_us(self) -> float | None:
        """Median proxy CPU time per request."""
        values = [v for m in self.rounds if (v := m.proxy_cpu_us_per_request) is not None]
        return statistics.median(values) if values else None

    @property
    def upstream_cpu_us(self) -> float:
        """Median upstream CPU time per request."""
        return statistics.median(m.upstream_cpu_us_per_request for m in self.rounds)

    @property
    def requests(self) -> int:
        """Requests completed over all rounds."""
        return sum(m.wrk.requests for m in self.rounds)

    @property
    def errors(self) -> int:
        """Errors over all rounds."""
        return sum(m.errors for m in self.rounds)


@dataclass(frozen=True, slots=True)
class TargetCheck:
    """One of the issue's targets, the figure measured for it and whether it holds."""

    name: str
    goal: str
    measured: str
    per_round: str
    holds: bool


class Results:
    """The measurements of one run, looked up by scenario and target."""

    def __init__(self, scenarios: Sequence[Scenario], measurements: Sequence[Measurement]) -> None:
        self.scenarios = tuple(scenarios)
        self.measurements = tuple(measurements)

    def cell(self, scenario: Scenario, target: str) -> Cell:
        """The rounds of ``scenario`` against ``target``."""
        rounds = tuple(
            m for m in self.measurements if m.scenario == scenario and m.target == target
        )
        if not rounds:
            raise KeyError(f"no measurement of {target} in {scenario.key}")
        return Cell(scenario, target, rounds)

    def scenario(self, key: str) -> Scenario:
        """The scenario called ``key``."""
        for scenario in self.scenarios:
            if scenario.key == key:
                return scenario
        raise KeyError(key)

    @property
    def errors(self) -> int:
        """Errors over every measurement."""
        return sum(m.errors for m in self.measurements)

    def per_round(self, scenario: Scenario, target: str) -> list[Measurement]:
        """The measurements of one cell in round order."""
        return sorted(self.cell(scenario, target).rounds, key=lambda m: m.round)

    def checks(self, latency_key: str, throughput_key: str) -> list[TargetCheck]:
        """The added-latency and throughput targets, from the scenarios named."""
        latency = self.scenario(latency_key)
        direct = self.cell(latency, DIRECT)
        gateway = self.cell(latency, LOCALGATE)
        added = gateway.latency_us(50) - direct.latency_us(50)
        added_rounds = [
            g.wrk.latency_us[50] - d.wrk.latency_us[50]
            for d, g in zip(
                self.per_round(latency, DIRECT), self.per_round(latency, LOCALGATE), strict=True
            )
        ]
        throughput = self.scenario(throughput_key)
        floor = self.cell(throughput, FLOOR)
        ratio = self.cell(throughput, LOCALGATE).rps / floor.rps
        ratio_rounds = [
            g.wrk.rps / f.wrk.rps
            for f, g in zip(
                self.per_round(throughput, FLOOR),
                self.per_round(throughput, LOCALGATE),
                strict=True,
            )
        ]
        return [
            TargetCheck(
                name="added latency",
                goal=f"localgate p50 - direct p50 ≤ {ADDED_LATENCY_TARGET_US / 1000:g} ms "
                f"({latency.title})",
                measured=f"{added / 1000:.3f} ms "
                f"({gateway.latency_us(50) / 1000:.3f} - {direct.latency_us(50) / 1000:.3f})",
                per_round=", ".join(f"{value / 1000:.3f}" for value in added_rounds),
                holds=added <= ADDED_LATENCY_TARGET_US,
            ),
            TargetCheck(
                name="throughput",
                goal=f"localgate req/s ≥ {THROUGHPUT_TARGET:.0%} of the floor's "
                f"({throughput.title})",
                measured=f"{ratio:.0%} ({self.cell(throughput, LOCALGATE).rps:,.0f} / "
                f"{floor.rps:,.0f} req/s)",
                per_round=", ".join(f"{value:.0%}" for value in ratio_rounds),
                holds=ratio >= THROUGHPUT_TARGET,
            ),
        ]
