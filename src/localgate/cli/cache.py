"""``localgate cache``: what the local answer cache holds, and clearing it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from localgate.admin.cache import CacheAdmin
from localgate.cli.errors import reported
from localgate.cli.options import config_option, group_config_option, load_or_exit

__all__ = ["cache"]


@click.group()
@group_config_option
def cache() -> None:
    """The local answer cache: what it holds, and clearing it."""


@cache.command()
@config_option
@click.option("--tenant", default=None, help="Only this tenant's entries.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def stats(config_path: Path | None, tenant: str | None, as_json: bool) -> None:
    """Entries per tenant and embedder, how many have expired, and for which models.

    Hits and misses are counted by the running gateway: see its /metrics
    (localgate_cache_lookups_total).
    """
    settings, _ = load_or_exit(config_path)
    with reported(), CacheAdmin.open(settings) as admin:
        found = admin.stats(tenant)
    if as_json:
        for entry in found:
            click.echo(
                json.dumps(
                    {
                        "tenant": entry.tenant,
                        "embedder": entry.embedder,
                        "entries": entry.entries,
                        "expired": entry.expired,
                        "models": entry.models,
                    },
                    ensure_ascii=False,
                )
            )
        return
    if not found:
        click.echo("The cache is empty.")
        return
    click.echo(f"{'TENANT':<20}{'ENTRIES':>9}{'EXPIRED':>9}  EMBEDDER / MODELS")
    for entry in found:
        models = ", ".join(f"{model} {count}" for model, count in sorted(entry.models.items()))
        click.echo(
            f"{entry.tenant:<20}{entry.entries:>9}{entry.expired:>9}  {entry.embedder} / {models}"
        )


@cache.command()
@config_option
@click.option("--tenant", default=None, help="Only this tenant's entries (default: all).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def clear(config_path: Path | None, tenant: str | None, yes: bool) -> None:
    """Drop cached answers; a running gateway sees it before its next lookup."""
    settings, _ = load_or_exit(config_path)
    whose = f"of tenant {tenant}" if tenant else "of every tenant"
    if not yes:
        click.confirm(f"Drop the cached answers {whose}?", abort=True)
    with reported(), CacheAdmin.open(settings) as admin:
        dropped = admin.clear(tenant)
    click.echo(f"Dropped {len(dropped)} cache collection(s) {whose}.")
