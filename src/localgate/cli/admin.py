"""``localgate admin``: the admin API's operators, its API tokens and local users.

Created here, on the gateway's host, and never through the API: whoever can mint a token
could mint an auditor's, so minting needs access to the state database.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import click

from localgate.admin.operator_stores import open_operator_store
from localgate.admin.operators import OperatorStore, Role, parse_duration
from localgate.cli.errors import reported
from localgate.cli.options import config_option, group_config_option, load_or_exit
from localgate.secret import Secret

__all__ = ["admin"]

_ROLES = click.Choice([role.value for role in Role])


def _operators(config_path: Path | None) -> OperatorStore:
    settings = load_or_exit(config_path)[0]
    with reported():  # an unreachable database_url: one line, exit code 1
        return open_operator_store(settings, serving=False)


@click.group()
@group_config_option
def admin() -> None:
    """The admin API's operators: API tokens and local users, with their roles."""


@admin.group()
@group_config_option
def token() -> None:
    """Admin API tokens (bearer tokens for scripts and tools)."""


@token.command("create")
@config_option
@click.option("--role", type=_ROLES, required=True, help="What the token may do.")
@click.option("--tenant", default=None, help="The tenant a tenant-admin token manages.")
@click.option("--expires", default=None, help="Lifetime, e.g. 30d, 12h (default: none).")
@click.option("--label", default="", help="Free-text note: who or what uses it.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object for scripts.")
def token_create(
    config_path: Path | None,
    role: str,
    tenant: str | None,
    expires: str | None,
    label: str,
    as_json: bool,
) -> None:
    """Create a token; it is printed once and stored only as a hash."""
    with _operators(config_path) as operators, reported():
        lifetime = parse_duration(expires) if expires else None
        issued = operators.create_token(Role(role), tenant, lifetime, label)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "token": issued.token.reveal(),
                    "token_id": issued.token_id,
                    "role": issued.role.value,
                    "tenant": issued.tenant,
                    "expires_at": issued.expires_at,
                }
            )
        )
        return
    click.echo(f"Created {issued.role.value} token {issued.token_id}.")
    click.echo("Store it now; it cannot be shown again:")
    click.echo(issued.token.reveal())


@token.command("list")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines for scripts.")
def token_list(config_path: Path | None, as_json: bool) -> None:
    """List tokens (ids, roles, states; never the tokens)."""
    with _operators(config_path) as operators:
        records = operators.list_tokens()
    if as_json:
        for record in records:
            click.echo(json.dumps(asdict(record)))
        return
    if not records:
        click.echo("No admin tokens.")
        return
    click.echo(f"{'TOKEN ID':<18}{'ROLE':<14}{'TENANT':<16}{'EXPIRES':<27}{'STATE':<9}LABEL")
    for r in records:
        state = "revoked" if r.revoked_at else "active"
        click.echo(
            f"{r.token_id:<18}{r.role:<14}{r.tenant or '-':<16}{r.expires_at or '-':<27}"
            f"{state:<9}{r.label}"
        )


@token.command("revoke")
@config_option
@click.argument("token_id")
def token_revoke(config_path: Path | None, token_id: str) -> None:
    """Revoke a token; the admin API refuses it from the next request on."""
    with _operators(config_path) as operators, reported():
        operators.revoke_token(token_id)
    click.echo(f"Revoked admin token {token_id}.")


@admin.group()
@group_config_option
def user() -> None:
    """Local users, who log in to the admin API with a password."""


@user.command("create")
@config_option
@click.argument("name")
@click.option("--role", type=_ROLES, required=True, help="What the user may do.")
@click.option("--tenant", default=None, help="The tenant a tenant-admin manages.")
@click.option(
    "--password-stdin", is_flag=True, help="Read the password from stdin (else: a prompt)."
)
def user_create(
    config_path: Path | None, name: str, role: str, tenant: str | None, password_stdin: bool
) -> None:
    """Create a user (password: 12 characters or more, stored as an argon2id hash)."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    with _operators(config_path) as operators, reported():
        created = operators.create_user(name, Role(role), Secret(password), tenant)
    click.echo(f"Created {created.role} user {created.name}.")


@user.command("list")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines for scripts.")
def user_list(config_path: Path | None, as_json: bool) -> None:
    """List users (names, roles, states; never the password hashes)."""
    with _operators(config_path) as operators:
        records = operators.list_users()
    if as_json:
        for record in records:
            click.echo(json.dumps(asdict(record)))
        return
    if not records:
        click.echo("No admin users.")
        return
    click.echo(f"{'NAME':<24}{'ROLE':<14}{'TENANT':<16}STATE")
    for r in records:
        state = "disabled" if r.disabled_at else "active"
        click.echo(f"{r.name:<24}{r.role:<14}{r.tenant or '-':<16}{state}")


@user.command("disable")
@config_option
@click.argument("name")
def user_disable(config_path: Path | None, name: str) -> None:
    """Disable a user; their sessions end at their next request."""
    with _operators(config_path) as operators, reported():
        operators.disable_user(name)
    click.echo(f"Disabled admin user {name}.")
