"""The workers benchmark's report: the ratio, the ceiling the machine allows, and the warning
when other programs took the CPUs."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from bench.machine import Machine
from bench.workers import Cell, _report
from bench.wrk import WrkResult

MACHINE = Machine(
    cpu_model="test CPU",
    nproc=2,
    usable_cpus=(0, 1),
    kernel="Linux",
    python="3.11",
    wrk="wrk 4.1",
    localgate="0.1.0",
    commit="abc",
)
OPTIONS = argparse.Namespace(
    out=Path("docs/benchmarks-workers.md"), rounds=2, duration=10, warmup=5, config=None
)


def _cell(workers: int, rps: float, gateway: float, load: float, busy: float) -> Cell:
    result = WrkResult(
        requests=int(rps * 10),
        duration_s=10.0,
        bytes_read=0,
        socket_errors=0,
        non_2xx=0,
        mean_us=1000.0,
        max_us=5000.0,
        latency_us={50.0: 2000.0, 75.0: 3000.0, 90.0: 4000.0, 99.0: 9000.0, 99.9: 12000.0},
        cpu_s=0.0,
    )
    return Cell(workers, 1, result, busy, gateway, load)


def test_a_quiet_machine_reaching_the_target() -> None:
    cells = [
        _cell(1, 2000, gateway=1.0, load=0.4, busy=1.4),
        _cell(2, 3600, gateway=1.7, load=0.3, busy=2.0),
        _cell(1, 2000, gateway=1.0, load=0.4, busy=1.4),
        _cell(2, 3600, gateway=1.7, load=0.3, busy=2.0),
    ]

    report = _report(MACHINE, datetime(2026, 12, 1, tzinfo=UTC), cells, OPTIONS, (0,))

    assert "| 1.80× (3,600 / 2,000 req/s) | 1.80, 1.80 | holds |" in report
    assert "| 1 | 2,000 (2,000-2,000) | 2.0 | 9.0 | 1.00 | 500 |" in report
    assert "Other programs" not in report


def test_a_busy_machine_is_said_to_be_busy_and_the_miss_reported() -> None:
    cells = [
        _cell(1, 1000, gateway=0.5, load=0.1, busy=2.0),
        _cell(2, 900, gateway=0.5, load=0.1, busy=2.0),
    ]
    options = argparse.Namespace(**{**vars(OPTIONS), "rounds": 1})

    report = _report(MACHINE, datetime(2026, 12, 1, tzinfo=UTC), cells, options, (0,))

    assert "| 0.90× (900 / 1,000 req/s) | 0.90 | **missed** |" in report
    assert "**Other programs kept 1.40 CPUs busy during the measurements**" in report
