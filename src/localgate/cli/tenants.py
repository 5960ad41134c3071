"""``localgate tenants``: the tenants known, and the policy their requests get."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from localgate.admin.keys import KeyAdmin
from localgate.admin.tenants import PolicySummary, TenantAdmin
from localgate.cli.options import config_option, group_config_option, load_or_exit

__all__ = ["tenants"]


@click.group()
@group_config_option
def tenants() -> None:
    """The tenants in the configuration and the key store, with their effective policy."""


@tenants.command("list")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines, whole policies.")
def tenants_list(config_path: Path | None, as_json: bool) -> None:
    """List tenants: keys, whether configured, and their policy in short."""
    settings, _ = load_or_exit(config_path)
    with KeyAdmin.open(settings) as keys:
        found = TenantAdmin(settings, keys).list()
    if as_json:
        for tenant in found:
            click.echo(json.dumps(dataclasses.asdict(tenant), ensure_ascii=False))
        return
    if not found:
        click.echo("No tenants: none configured, and no keys.")
        return
    click.echo(f"{'TENANT':<20}{'KEYS':>5}{'REVOKED':>9}  {'CONFIGURED':<12}POLICY")
    for tenant in found:
        configured = "yes" if tenant.configured else "no"
        click.echo(
            f"{tenant.name:<20}{tenant.active_keys:>5}{tenant.revoked_keys:>9}  "
            f"{configured:<12}{_policy_line(tenant.policy)}"
        )


def _policy_line(policy: PolicySummary) -> str:
    redaction = policy.redaction
    if not redaction.enabled:
        redacts = "redaction off"
    else:
        redacts = f"redaction {redaction.default_action}"
        if redaction.actions:
            redacts += " (" + ", ".join(f"{t} {a}" for t, a in redaction.actions.items()) + ")"
    cache = policy.cache
    layers = [name for name, on in (("exact", cache.exact), ("semantic", cache.semantic)) if on]
    caches = f"cache {'+'.join(layers) or 'no layer'}" if cache.enabled else "cache off"
    rag = policy.rag
    retrieves = (
        f"rag {rag.collection or '(x-localgate-rag-collection)'}" if rag.enabled else "rag off"
    )
    parts = [redacts, caches, retrieves]
    if policy.local_embeddings:
        parts.append("local embeddings")
    limits = policy.limits
    counted = [
        f"{value} {unit}"
        for value, unit in (
            (limits.requests_per_minute, "rpm"),
            (limits.tokens_per_minute, "tpm"),
            (limits.tokens_per_day, "tokens/day"),
            (limits.concurrent_requests, "concurrent"),
        )
        if value is not None
    ]
    if counted:
        parts.append("limits " + ", ".join(counted))
    return "; ".join(parts)
