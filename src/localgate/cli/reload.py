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

__all__ = ["reload_running_gateway"]

_POLL_S = 0.1


def reload_running_gateway(settings: Settings, timeout: float) -> int:
    """Send SIGHUP to the gateway serving ``settings``; 0 applied, 1 rejected, 2 no gateway."""
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
    before = _config(url)
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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        after = _config(url)
        if after is not None and after["reloads"] > before["reloads"]:
            return _report(after)
        time.sleep(_POLL_S)
    click.echo(f"localgate: the gateway did not report a reload within {timeout:g} s", err=True)
    return 2


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


def _config(url: str) -> dict[str, Any] | None:
    """The ``config`` part of ``/readyz`` (which answers 503 with it when not ready)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our own URL
            body = response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
    except (OSError, ValueError):
        return None
    try:
        config = json.loads(body)["config"]
    except (ValueError, KeyError, TypeError):
        return None
    return config if isinstance(config, dict) else None
