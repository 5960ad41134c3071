"""``localgate migrate``: bring the configured databases to this version's schema, then exit."""

from __future__ import annotations

from pathlib import Path

import click

from localgate.admin.migrations import CURRENT, migrate_databases
from localgate.cli.errors import reported
from localgate.cli.options import config_option, load_or_exit

__all__ = ["migrate"]


@click.command()
@config_option
def migrate(config_path: Path | None) -> None:
    """Apply the pending schema migrations of the state and audit stores, then exit.

    The gateway migrates at start too; run this first (a Kubernetes Job, a compose
    one-shot) to see a failed migration before a rollout. Exit code 1 on failure.
    """
    # Never calls an upstream: a migration job is not given the upstream key (compose.yaml,
    # deploy/kubernetes/migrate-job.yaml), so its file is not read.
    settings, _ = load_or_exit(config_path, upstream_keys=False)
    with reported():
        stores = migrate_databases(settings)
    for store in stores:
        if store.before != store.after:
            change = f"schema {store.before or 'none'} -> {store.after}"
        elif store.after == CURRENT:
            change = "current"
        else:
            change = f"schema {store.after}, current"
        click.echo(f"{store.name} store ({store.location}): {change}")
