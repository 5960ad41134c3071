"""``localgate doctor``: one line per check of this host, with the fix when one fails."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from localgate.admin.doctor import Check, Doctor
from localgate.cli.options import config_option, load_or_exit

__all__ = ["doctor", "print_checks"]


@click.command()
@config_option
@click.option("--offline", is_flag=True, help="Do not call the upstream.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option(
    "--tls-warn-days",
    type=float,
    default=14.0,
    show_default=True,
    help="Warn about TLS certificates that expire within this many days.",
)
def doctor(config_path: Path | None, offline: bool, as_json: bool, tls_warn_days: float) -> None:
    """Check this host: configuration, files, keys, TLS, database, vector store, upstream.

    Exit code 1 if any check fails (a warning does not fail).
    """
    settings, _ = load_or_exit(config_path)
    print_checks(Doctor(settings, offline=offline, tls_warn_days=tls_warn_days).run(), as_json)


def print_checks(checks: list[Check], as_json: bool) -> None:
    """Print the checks (one line each, or JSON); exit 1 if one failed."""
    if as_json:
        click.echo(json.dumps([check.as_dict() for check in checks], ensure_ascii=False, indent=2))
    else:
        for check in checks:
            status = ("WARN" if check.warning else "OK  ") if check.ok else "FAIL"
            line = f"{status}  {check.name}: {check.detail}"
            if check.fix:
                line += f" -- fix: {check.fix}"
            click.echo(line)
    if not all(check.ok for check in checks):
        sys.exit(1)
