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

__all__ = [
    "REFERENCE_LETTERS",
    "WrkError",
    "WrkResult",
    "lua_script",
    "lua_string",
    "reference",
    "run_wrk",
    "wrk_command",
]

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


def lua_script(
    method: str, body: bytes, headers: Mapping[str, str], *, marker: bytes | None = None
) -> str:
    """A wrk script sending ``body`` with ``headers`` and reporting a ``BENCH_RESULT`` line.

    With ``marker``, each request puts a reference of its own there (``reference``: seven
    letters, counted up from a random start per run), so no two requests of a run, nor of
    two runs, send the same text; without it, the marker (if any) is sent as it is.
    """
    lines = [f"wrk.method = {lua_string(method)}", f"wrk.body = {lua_string(body)}"]
    lines += [f"wrk.headers[{lua_string(k)}] = {lua_string(v)}" for k, v in headers.items()]
    percentiles = ", ".join(f"{q:g}" for q in PERCENTILES)
    script = "\n".join(lines) + _DONE_HOOK % {"percentiles": percentiles, "prefix": _RESULT_PREFIX}
    if marker is None or marker not in body:
        return script
    before, after = body.split(marker, 1)
    return script + _VARYING_HOOK % {
        "before": lua_string(before),
        "after": lua_string(after),
        "letters": REFERENCE_LETTERS,
    }


# Letters in a request's reference; 26^7 references, so runs starting at random places
# hardly ever meet.
REFERENCE_LETTERS = 7


def reference(number: int) -> bytes:
    """The reference of request ``number``: base 26 in lower-case letters (letters, so the
    detector's digit-driven work is that of the body itself), as the wrk script makes it."""
    letters = []
    for _ in range(REFERENCE_LETTERS):
        number, digit = divmod(number, 26)
        letters.append(chr(ord("a") + digit))
    return "".join(reversed(letters)).encode()


# Builds each request's body around its reference (in Lua, as reference() does in Python).
_VARYING_HOOK = """
local before, after = %(before)s, %(after)s
math.randomseed(os.time() + math.floor(os.clock() * 1000000))
local counter = math.random(0, 2000000000)
local function reference(number)
  local letters = {}
  for i = %(letters)d, 1, -1 do
    letters[i] = string.char(97 + number %% 26)
    number = math.floor(number / 26)
  end
  return table.concat(letters)
end
request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil, before .. reference(counter) .. after)
end
"""


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
