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
    "CORE_GOALS",
    "DEFAULTS_GOALS",
    "THROUGHPUT_TARGET",
    "Cell",
    "Goals",
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
class Goals:
    """The targets a run is checked against (issue 18's, by what localgate runs with)."""

    name: str
    added_latency_us: float = ADDED_LATENCY_TARGET_US
    # The defaults write the audit trail durably before answering: their latency target
    # is 1 ms plus the fsync latency measured on the same disk in the same run.
    plus_fsync: bool = False
    throughput: float = THROUGHPUT_TARGET
    cpu_ratio: float | None = None  # localgate's CPU per request / the floor's, at most
    stream_first_event_us: float | None = None  # added time to the first event, at most
    stream_throughput: float | None = None  # streamed events/s / the floor's, at least


# Redaction and the audit trail on, as `localgate serve` runs out of the box.
DEFAULTS_GOALS = Goals(
    "defaults",
    plus_fsync=True,
    throughput=0.35,
    cpu_ratio=3.0,
    stream_first_event_us=1000.0,
    stream_throughput=0.50,
)
# Redaction and the audit trail off (bench/configs/core.yaml).
CORE_GOALS = Goals("core", cpu_ratio=1.5)


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
    # Streaming with one connection: median time to the first event (bench.probes).
    first_event_us: float | None = None

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
    def first_event_us(self) -> float | None:
        """Median over rounds of the time to a stream's first event (None: not probed)."""
        values = [m.first_event_us for m in self.rounds if m.first_event_us is not None]
        return statistics.median(values) if values else None

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

    def __init__(
        self,
        scenarios: Sequence[Scenario],
        measurements: Sequence[Measurement],
        *,
        goals: Goals | None = None,
        fsync_us: float | None = None,
        events_per_answer: int | None = None,
    ) -> None:
        self.scenarios = tuple(scenarios)
        self.measurements = tuple(measurements)
        self.goals = goals or Goals("latency and throughput")
        # The disk's fsync latency measured in the run (bench.probes), if it was.
        self.fsync_us = fsync_us
        # Events in one streamed answer (the same for every target: checked before).
        self.events_per_answer = events_per_answer

    @property
    def added_latency_goal_us(self) -> float:
        """The added-latency target, the measured fsync latency included if it counts."""
        goals = self.goals
        if goals.plus_fsync and self.fsync_us is not None:
            return goals.added_latency_us + self.fsync_us
        return goals.added_latency_us

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

    def checks(
        self,
        latency_key: str,
        throughput_key: str,
        stream_latency_key: str = "stream-c1",
        stream_throughput_key: str = "stream-c64",
    ) -> list[TargetCheck]:
        """The run's targets (``goals``), from the scenarios named; the streaming ones only
        if the goals have them and the run has those scenarios."""
        goals = self.goals
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
        allowed = self.added_latency_goal_us
        fsync = (
            f" + the disk's fsync latency {self.fsync_us / 1000:.3f} ms = {allowed / 1000:.3f} ms"
            if goals.plus_fsync and self.fsync_us is not None
            else ""
        )
        throughput = self.scenario(throughput_key)
        floor = self.cell(throughput, FLOOR)
        ratio = self.cell(throughput, LOCALGATE).rps / floor.rps
        checks = [
            TargetCheck(
                name="added latency",
                goal=f"localgate p50 - direct p50 ≤ {goals.added_latency_us / 1000:g} ms"
                f"{fsync} ({latency.title})",
                measured=f"{added / 1000:.3f} ms "
                f"({gateway.latency_us(50) / 1000:.3f} - {direct.latency_us(50) / 1000:.3f})",
                per_round=", ".join(f"{value / 1000:.3f}" for value in added_rounds),
                holds=added <= allowed,
            ),
            TargetCheck(
                name="throughput",
                goal=f"localgate req/s ≥ {goals.throughput:.0%} of the floor's "
                f"({throughput.title})",
                measured=f"{ratio:.0%} ({self.cell(throughput, LOCALGATE).rps:,.0f} / "
                f"{floor.rps:,.0f} req/s)",
                per_round=", ".join(f"{value:.0%}" for value in self._rps_ratios(throughput)),
                holds=ratio >= goals.throughput,
            ),
        ]
        if goals.cpu_ratio is not None:
            checks += self._cpu_check(throughput, goals.cpu_ratio)
        keys = {scenario.key for scenario in self.scenarios}
        if goals.stream_first_event_us is not None and stream_latency_key in keys:
            checks += self._first_event_check(
                self.scenario(stream_latency_key), goals.stream_first_event_us
            )
        if goals.stream_throughput is not None and stream_throughput_key in keys:
            checks.append(
                self._events_check(self.scenario(stream_throughput_key), goals.stream_throughput)
            )
        return checks

    def _rps_ratios(self, scenario: Scenario) -> list[float]:
        return [
            g.wrk.rps / f.wrk.rps
            for f, g in zip(
                self.per_round(scenario, FLOOR), self.per_round(scenario, LOCALGATE), strict=True
            )
        ]

    def _cpu_check(self, scenario: Scenario, limit: float) -> list[TargetCheck]:
        floor_cpu = self.cell(scenario, FLOOR).proxy_cpu_us
        gateway_cpu = self.cell(scenario, LOCALGATE).proxy_cpu_us
        if floor_cpu is None or gateway_cpu is None or floor_cpu <= 0:
            return []
        rounds = [
            g / f
            for fm, gm in zip(
                self.per_round(scenario, FLOOR), self.per_round(scenario, LOCALGATE), strict=True
            )
            if (f := fm.proxy_cpu_us_per_request) and (g := gm.proxy_cpu_us_per_request)
        ]
        ratio = gateway_cpu / floor_cpu
        return [
            TargetCheck(
                name="CPU per request",
                goal=f"localgate CPU per request ≤ {limit:g}x the floor's ({scenario.title})",
                measured=f"{ratio:.2f}x ({gateway_cpu:.0f} / {floor_cpu:.0f} µs)",
                per_round=", ".join(f"{value:.2f}x" for value in rounds),
                holds=ratio <= limit,
            )
        ]

    def _first_event_check(self, scenario: Scenario, limit_us: float) -> list[TargetCheck]:
        direct = self.cell(scenario, DIRECT).first_event_us
        gateway = self.cell(scenario, LOCALGATE).first_event_us
        if direct is None or gateway is None:
            return []
        rounds = [
            g.first_event_us - d.first_event_us
            for d, g in zip(
                self.per_round(scenario, DIRECT), self.per_round(scenario, LOCALGATE), strict=True
            )
            if g.first_event_us is not None and d.first_event_us is not None
        ]
        added = gateway - direct
        return [
            TargetCheck(
                name="stream first event",
                goal=f"localgate time to first event - direct's ≤ {limit_us / 1000:g} ms "
                f"({scenario.title})",
                measured=f"{added / 1000:.3f} ms ({gateway / 1000:.3f} - {direct / 1000:.3f})",
                per_round=", ".join(f"{value / 1000:.3f}" for value in rounds),
                holds=added <= limit_us,
            )
        ]

    def _events_check(self, scenario: Scenario, share: float) -> TargetCheck:
        floor = self.cell(scenario, FLOOR).rps
        gateway = self.cell(scenario, LOCALGATE).rps
        events = self.events_per_answer or 1
        ratio = gateway / floor
        return TargetCheck(
            name="stream events/s",
            goal=f"localgate streamed events/s ≥ {share:.0%} of the floor's ({scenario.title})",
            measured=f"{ratio:.0%} ({gateway * events:,.0f} / {floor * events:,.0f} events/s, "
            f"{events} per answer)",
            per_round=", ".join(f"{value:.0%}" for value in self._rps_ratios(scenario)),
            holds=ratio >= share,
        )
