"""What the benchmark ran on, and how busy the whole machine was while it measured."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = ["Machine", "MachineCpu", "describe_machine"]

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Machine:
    """The facts the report opens with."""

    cpu_model: str
    nproc: int
    usable_cpus: tuple[int, ...]
    kernel: str
    python: str
    wrk: str
    localgate: str
    commit: str


@dataclass(frozen=True, slots=True)
class MachineCpu:
    """Busy and total CPU seconds of the whole machine so far (all CPUs added up)."""

    busy_s: float
    total_s: float

    @classmethod
    def now(cls) -> MachineCpu:
        """Read ``/proc/stat``; busy excludes idle and iowait."""
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal (guest time is inside user already)
        total = sum(fields[:8])
        busy = total - fields[3] - fields[4]
        return cls(busy_s=busy / _CLOCK_TICKS, total_s=total / _CLOCK_TICKS)

    def __sub__(self, earlier: MachineCpu) -> MachineCpu:
        return MachineCpu(self.busy_s - earlier.busy_s, self.total_s - earlier.total_s)


def describe_machine(repo: Path) -> Machine:
    """CPU, kernel and tool versions, and the commit measured."""
    return Machine(
        cpu_model=_cpu_model(),
        nproc=os.cpu_count() or 1,
        usable_cpus=tuple(sorted(os.sched_getaffinity(0))),
        kernel=f"{platform.system()} {platform.release()}",
        python=sys.version.split()[0],
        wrk=_first_line(["wrk", "--version"]),
        localgate=_version("localgate"),
        commit=_commit(repo),
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _first_line(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (done.stdout + done.stderr).strip().splitlines()
    # "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer"
    return lines[0].split(" Copyright")[0] if lines else "unknown"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def _commit(repo: Path) -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", "src"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    # Untracked files alone change nothing that runs: only a changed tracked file can import them.
    return f"{head} (with uncommitted changes in src/)" if dirty else head
