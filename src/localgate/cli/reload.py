"""``localgate reload``: signal the running gateway and report what its reload did."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click

from localgate.config import Settings
from localgate.policy.host_reload import (
    APPLIED,
    NO_ANSWER,
    REJECTED,
    RESTARTED,
    STARTING,
    WorkerConfig,
    WorkerOutcome,
    reload_outcomes,
)

__all__ = ["reload_running_gateway"]

_POLL_S = 0.1


def reload_running_gateway(settings: Settings, timeout: float) -> int:
    """Send SIGHUP to the gateway serving ``settings``; 0 applied (by every worker), 1
    rejected (by any), 2 no gateway (or a worker that did not report)."""
    from localgate.cli import PID_FILE

    pid_file = settings.data_dir / PID_FILE
    try:
        pid = int(pid_file.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        click.echo(
            f"localgate: no running gateway found ({pid_file} is missing or unreadable); "
            "is `localgate serve` running with this configuration?",
            err=True,
        )
        return 2
    if not _is_a_gateway(pid):
        click.echo(
            f"localgate: {pid_file} names pid {pid}, which is not a localgate gateway (a stale "
            "file from a gateway that did not stop cleanly?); not signalling it",
            err=True,
        )
        return 2
    url = _readyz_url(settings)
    answer = _readyz(url)
    before = _config(answer)
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        click.echo(f"localgate: the gateway of {pid_file} (pid {pid}) is not running", err=True)
        return 2
    except PermissionError:
        click.echo(f"localgate: not allowed to signal the gateway (pid {pid})", err=True)
        return 2
    if before is None:
        click.echo(f"Sent SIGHUP to pid {pid}; {url} did not answer, so no result to show.")
        return 0
    if answer is not None and "workers" in answer:
        return _wait_for_workers(url, answer, timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        after = _config(_readyz(url))
        if after is not None and after["reloads"] > before["reloads"]:
            return _report(after)
        time.sleep(_POLL_S)
    click.echo(f"localgate: the gateway did not report a reload within {timeout:g} s", err=True)
    return 2


def _wait_for_workers(url: str, before: dict[str, Any], timeout: float) -> int:
    """``serve --workers N``: each worker's outcome, once every worker that answered before
    the signal has reported (or ``timeout`` has passed); 0 all applied, 1 any rejected, 2
    any did not report."""
    count = int(before["worker_count"])
    earlier = _worker_configs(before)
    deadline = time.monotonic() + timeout
    while True:
        final = time.monotonic() >= deadline
        outcomes = reload_outcomes(earlier, _worker_configs(_readyz(url)), count, final=final)
        if outcomes is not None:
            return _report_workers(outcomes, timeout)
        time.sleep(_POLL_S)


def _worker_configs(answer: dict[str, Any] | None) -> dict[int, WorkerConfig]:
    configs: dict[int, WorkerConfig] = {}
    for raw in (answer or {}).get("workers", []):
        try:
            config = WorkerConfig.from_dict(raw)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        configs[config.worker] = config
    return configs


def _report_workers(outcomes: list[WorkerOutcome], timeout: float) -> int:
    rejected = sum(1 for outcome in outcomes if outcome.outcome == REJECTED)
    silent = sum(1 for outcome in outcomes if outcome.outcome == NO_ANSWER)
    failed = bool(rejected or silent)
    if not failed:
        click.echo(f"Reloaded: every worker ({len(outcomes)}) runs the file now.")
    else:
        what = [
            *([f"{rejected} rejected the file"] if rejected else []),
            *([f"{silent} did not report a reload within {timeout:g} s"] if silent else []),
        ]
        click.echo(
            f"Not reloaded everywhere: of {len(outcomes)} workers, {' and '.join(what)}; a "
            "worker that rejects it keeps running its last good configuration.",
            err=True,
        )
    for outcome in outcomes:
        click.echo(f"  {_describe(outcome, timeout)}", err=failed)
        for problem in outcome.problems:
            click.echo(f"      {problem}", err=failed)
    notes = dict.fromkeys(note for outcome in outcomes for note in outcome.restart_needed)
    for note in notes:
        click.echo(f"  {note}", err=failed)
    return 1 if rejected else 2 if silent else 0


def _describe(outcome: WorkerOutcome, timeout: float) -> str:
    who = f"worker {outcome.worker}" + (f" (pid {outcome.pid})" if outcome.pid else "")
    running = f"version {outcome.version} ({outcome.hash})"
    if outcome.outcome == APPLIED:
        return f"{who}: applied; running {running}"
    if outcome.outcome == REJECTED:
        return f"{who}: rejected; still running {running}. Problems:"
    if outcome.outcome == RESTARTED:
        return f"{who}: started again since; it read the file as it started, running {running}"
    if outcome.outcome == STARTING:
        return f"{who}: starting or restarting; it reads the file as it starts"
    return f"{who}: did not report a reload within {timeout:g} s; was running {running}"


def _is_a_gateway(pid: int) -> bool:
    """Whether ``pid`` runs localgate: a pid file left behind may name another program by
    now, and SIGHUP ends most programs. Where /proc is missing, assume it does."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        command = cmdline.read_bytes()
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except OSError:
        return True
    return b"localgate" in command


def _report(config: dict[str, Any]) -> int:
    last = config["last_reload"]
    if last["applied"]:
        click.echo(
            f"Reloaded: running configuration version {config['version']} ({config['hash']})."
        )
        for note in last["restart_needed"]:
            click.echo(f"  {note}")
        return 0
    click.echo(
        f"Rejected: still running configuration version {config['version']} "
        f"({config['hash']}). Problems:",
        err=True,
    )
    for problem in last["problems"]:
        click.echo(f"  {problem}", err=True)
    return 1


def _readyz_url(settings: Settings) -> str:
    host = settings.server.host
    if host in ("0.0.0.0", "", "::"):  # noqa: S104 - the wildcard address, read not bound
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.server.port}/readyz"


def _readyz(url: str) -> dict[str, Any] | None:
    """``/readyz``'s answer (503 with it when not ready), with every worker's configuration
    when several serve the port; None when it does not answer."""
    try:
        with urllib.request.urlopen(f"{url}?workers=all", timeout=5) as response:  # noqa: S310 - our own URL
            body = response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
    except (OSError, ValueError):
        return None
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _config(answer: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``config`` part of ``/readyz``: the answering worker's."""
    config = (answer or {}).get("config")
    return config if isinstance(config, dict) else None
