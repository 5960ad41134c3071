"""``localgate keys``: create, list and revoke tenant API keys."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from localgate.admin.keys import KeyAdmin
from localgate.cli.errors import reported
from localgate.cli.options import config_option, group_config_option, load_or_exit
from localgate.errors import InvalidArgument, NotFound

__all__ = ["keys"]


def _admin(config_path: Path | None) -> KeyAdmin:
    settings = load_or_exit(config_path)[0]
    with reported():  # an unreachable database_url: one line, exit code 1
        return KeyAdmin.open(settings)


@click.group()
@group_config_option
def keys() -> None:
    """Create, list and revoke tenant API keys."""


@keys.command("create")
@config_option
@click.option("--tenant", required=True, help="Tenant the key belongs to.")
@click.option("--label", default="", help="Free-text note, e.g. the application using the key.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object for scripts.")
def keys_create(config_path: Path | None, tenant: str, label: str, as_json: bool) -> None:
    """Create a key; it is printed once and stored only as a hash."""
    with _admin(config_path) as admin:
        try:
            issued = admin.create(tenant, label)
        except InvalidArgument as exc:
            raise click.BadParameter(exc.message, param_hint="--tenant") from exc
    if as_json:
        click.echo(
            json.dumps(
                {"tenant": issued.tenant, "key_id": issued.key_id, "key": issued.key.reveal()}
            )
        )
        return
    click.echo(f"Created key {issued.key_id} for tenant {issued.tenant}.")
    click.echo("Store it now; it cannot be shown again:")
    click.echo(issued.key.reveal())


@keys.command("list")
@config_option
@click.option("--tenant", default=None, help="Only this tenant's keys.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines for scripts.")
def keys_list(config_path: Path | None, tenant: str | None, as_json: bool) -> None:
    """List keys (ids, tenants, state; never the keys themselves)."""
    with _admin(config_path) as admin:
        records = admin.list(tenant)
    if as_json:
        for record in records:
            click.echo(
                json.dumps(
                    {
                        "key_id": record.key_id,
                        "tenant": record.tenant,
                        "label": record.label,
                        "created_at": record.created_at,
                        "revoked_at": record.revoked_at,
                    }
                )
            )
        return
    if not records:
        click.echo("No keys.")
        return
    click.echo(f"{'KEY ID':<18}{'TENANT':<20}{'CREATED':<27}{'STATE':<9}LABEL")
    for record in records:
        state = "revoked" if record.revoked_at else "active"
        click.echo(
            f"{record.key_id:<18}{record.tenant:<20}{record.created_at:<27}{state:<9}{record.label}"
        )


@keys.command("revoke")
@config_option
@click.argument("key_id")
def keys_revoke(config_path: Path | None, key_id: str) -> None:
    """Revoke a key; the running gateway refuses it from the next request on."""
    with _admin(config_path) as admin:
        try:
            admin.revoke(key_id)
        except NotFound as exc:
            click.echo(f"localgate: {exc.message}", err=True)
            sys.exit(1)
    click.echo(f"Revoked key {key_id}.")
