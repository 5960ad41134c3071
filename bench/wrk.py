"""Driving wrk: the Lua script for a POST with a JSON body, the command, the result.

wrk prints its latency distribution for humans; the script's ``done`` hook also
prints one machine-readable line (``BENCH_RESULT {json}``) with the request count,
the errors and the percentiles in microseconds, which is what the benchmark reads.
"""

from __future__ import annotations

import json
import resource
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WrkError", "WrkResult", "lua_script", "lua_string", "run_wrk", "wrk_command"]

_RESULT_PREFIX = "BENCH_RESULT "
# Percentiles read from wrk's histogram; the keys of ``WrkResult.latency_us``.
PERCENTILES = (50.0, 75.0, 90.0, 99.0, 99.9)

_DONE_HOOK = """
done = function(summary, latency, requests)
  local e = summary.errors
  local p = {}
  for _, q in ipairs({%(percentiles)s}) do
    table.insert(p, string.format('"%%s": %%.0f', tostring(q), latency:percentile(q)))
  end
  io.write(string.format(
    '%(prefix)s{"requests": %%.0f, "duration_us": %%.0f, "bytes": %%.0f, '
    .. '"connect": %%.0f, "read": %%.0f, "write": %%.0f, "status": %%.0f, "timeout": %%.0f, '
    .. '"mean_us": %%.1f, "max_us": %%.0f, "percentiles_us": {%%s}}\\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max, table.concat(p, ", ")))
end
"""


class WrkError(RuntimeError):
    """wrk failed to run or printed no result."""


@dataclass(frozen=True, slots=True)
class WrkResult:
    """One wrk run: counts, errors and the latency distribution."""

    requests: int
    duration_s: float
    bytes_read: int
    socket_errors: int  # connect + read + write + timeout
    non_2xx: int
    mean_us: float
    max_us: float
    latency_us: Mapping[float, float]
    cpu_s: float  # wrk's own user + system time

    @property
    def rps(self) -> float:
        """Completed requests per second."""
        return self.requests / self.duration_s if self.duration_s else 0.0


def lua_script(method: str, body: bytes, headers: Mapping[str, str]) -> str:
    """A wrk script sending ``body`` with ``headers`` and reporting a ``BENCH_RESULT`` line."""
    lines = [f"wrk.method = {lua_string(method)}", f"wrk.body = {lua_string(body)}"]
    lines += [f"wrk.headers[{lua_string(k)}] = {lua_string(v)}" for k, v in headers.items()]
    percentiles = ", ".join(f"{q:g}" for q in PERCENTILES)
    return "\n".join(lines) + _DONE_HOOK % {"percentiles": percentiles, "prefix": _RESULT_PREFIX}


def wrk_command(
    url: str,
    script: Path,
    *,
    connections: int,
    duration_s: int,
    cpus: Sequence[int] | None,
) -> list[str]:
    """The wrk command line, pinned to ``cpus`` with taskset when given."""
    command = [
        "wrk",
        "--threads",
        "1",
        "--connections",
        str(connections),
        "--duration",
        f"{duration_s}s",
        "--timeout",
        "10s",
        "--latency",
        "--script",
        str(script),
        url,
    ]
    if cpus:
        command = ["taskset", "--cpu-list", ",".join(map(str, cpus)), *command]
    return command


def run_wrk(command: Sequence[str], timeout_s: float) -> tuple[WrkResult, str]:
    """Run wrk to completion; the parsed result and wrk's own output."""
    # Servers still running are not waited for, so the children's usage grows by wrk's alone.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WrkError(f"wrk did not complete: {exc}") from exc
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip())[-500:]
        raise WrkError(f"wrk exited with {done.returncode}: {said}")
    for line in done.stdout.splitlines():
        if line.startswith(_RESULT_PREFIX):
            return _parse(json.loads(line[len(_RESULT_PREFIX) :]), cpu_s), done.stdout
    raise WrkError(f"wrk printed no {_RESULT_PREFIX.strip()} line:\n{done.stdout[-1000:]}")


def _parse(raw: Mapping[str, object], cpu_s: float) -> WrkResult:
    def number(key: str, source: Mapping[str, object] = raw) -> float:
        value = source[key]
        if not isinstance(value, int | float):
            raise WrkError(f"wrk result field {key!r} is not a number: {value!r}")
        return float(value)

    percentiles = raw["percentiles_us"]
    if not isinstance(percentiles, dict):
        raise WrkError("wrk result has no percentiles")
    return WrkResult(
        requests=int(number("requests")),
        duration_s=number("duration_us") / 1e6,
        bytes_read=int(number("bytes")),
        socket_errors=int(number("connect") + number("read") + number("write") + number("timeout")),
        non_2xx=int(number("status")),
        mean_us=number("mean_us"),
        max_us=number("max_us"),
        latency_us={q: number(f"{q:g}", percentiles) for q in PERCENTILES},
        cpu_s=cpu_s,
    )


def lua_string(value: str | bytes) -> str:
    """``value`` as a Lua string literal (any bytes, UTF-8 included)."""
    # Decimal escapes carry any byte, so the literal is exact for UTF-8 too.
    out = []
    for byte in value.encode() if isinstance(value, str) else value:
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03d}")
    return '"' + "".join(out) + '"'
