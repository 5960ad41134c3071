"""The ``localgate`` command: serve, check a configuration, manage tenant keys."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from localgate import __version__
from localgate.cli.options import config_option, load_or_exit

__all__ = ["PID_FILE", "main"]

# In the data directory: the process id of the gateway `localgate serve` runs.
PID_FILE = "localgate.pid"

# Command groups imported only when used: the audit store and the vector layer take about a
# second to import, which `localgate --help` and `localgate keys list` should not pay.
# name -> (module, attribute, the one-line help shown in `localgate --help`)
_LAZY_GROUPS = {
    "audit": (
        "localgate.cli.audit",
        "audit",
        "Verify, prove, inspect and maintain the audit trail.",
    ),
    "cache": (
        "localgate.cli.vector",
        "cache",
        "The local answer cache: what it holds, and clearing it.",
    ),
    "rag": (
        "localgate.cli.vector",
        "rag",
        "Local retrieval: ingest documents, search them, list and delete collections.",
    ),
}


class _LazyGroup(click.Group):
    """A click group whose heavier subcommand groups are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_LAZY_GROUPS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        lazy = _LAZY_GROUPS.get(cmd_name)
        if lazy is None:
            return super().get_command(ctx, cmd_name)
        module, attribute, _ = lazy
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module}.{attribute} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [
            (name, _LAZY_GROUPS[name][2])
            if name in _LAZY_GROUPS
            else (name, self.commands[name].get_short_help_str(formatter.width))
            for name in self.list_commands(ctx)
            if name in _LAZY_GROUPS or not self.commands[name].hidden
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup)
@click.version_option(__version__, prog_name="localgate")
def main() -> None:
    """localgate: a self-hosted Gemini gateway that keeps personal data inside the company."""


@main.command()
@config_option
@click.option("--host", default=None, help="Address to listen on (default: server.host).")
@click.option("--port", type=int, default=None, help="Port to listen on (default: server.port).")
def serve(config_path: Path | None, host: str | None, port: int | None) -> None:
    """Run the gateway."""
    import uvicorn

    from localgate.app import create_app, server_options

    settings, source = load_or_exit(config_path)
    logging.basicConfig(
        level=settings.logging.level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    bind_host = host or settings.server.host
    bind_port = settings.server.port if port is None else port
    logging.getLogger("localgate").info(
        "localgate %s: config %s, data in %s, upstream %s, listening on http://%s:%d",
        __version__,
        source or "<defaults>",
        settings.data_dir,
        settings.upstream.base_url,
        bind_host,
        bind_port,
    )
    # `localgate reload` finds the gateway by this file and signals it (SIGHUP).
    pid_file = settings.data_dir / PID_FILE
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{os.getpid()}\n", encoding="ascii")
    try:
        uvicorn.run(
            create_app(settings, source),
            host=bind_host,
            port=bind_port,
            log_config=None,
            log_level=settings.logging.level,
            **server_options(settings),
        )
    finally:
        with contextlib.suppress(OSError):
            if pid_file.read_text(encoding="ascii").strip() == str(os.getpid()):
                pid_file.unlink()


@main.command()
@config_option
@click.option(
    "--timeout",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds to wait for the gateway to report the reload's result.",
)
def reload(config_path: Path | None, timeout: float) -> None:
    """Make the running gateway read its configuration again; print what it did.

    The gateway validates the file as `localgate check` does. A rejected file changes
    nothing: the gateway keeps running its last good configuration. Exit code 0 when
    applied, 1 when rejected, 2 when no gateway answered.
    """
    from localgate.cli.reload import reload_running_gateway
    from localgate.config import load_settings
    from localgate.errors import ConfigError

    try:
        settings, _ = load_settings(config_path)
    except ConfigError as exc:
        # Checked here with the gateway's own validator: a file it would reject is not
        # sent to it, and the problems are shown where they are being fixed.
        click.echo(f"localgate: invalid configuration in {exc.source}:", err=True)
        for problem in exc.problems:
            click.echo(f"  {problem}", err=True)
        click.echo("The gateway was not asked to reload; it keeps its configuration.", err=True)
        sys.exit(1)
    sys.exit(reload_running_gateway(settings, timeout))


@main.command()
@config_option
def check(config_path: Path | None) -> None:
    """Validate a configuration; print every problem with its field path."""
    settings, source = load_or_exit(config_path)
    click.echo(f"{source or '<defaults>'}: OK")
    if settings.upstream_api_key is None:
        click.echo(
            "note: no upstream API key (GEMINI_API_KEY or upstream.api_key_file); "
            "the gateway will start but refuse to forward"
        )


@main.command()
@config_option
@click.argument("text", required=False)
@click.option(
    "--tenant", default=None, help="Apply this tenant's policy (default: the global one)."
)
@click.option(
    "--detect-jsonl",
    is_flag=True,
    help='Read {"id", "text"} JSON lines from stdin; write {"id", "entities"} lines.',
)
def redact(
    config_path: Path | None, text: str | None, tenant: str | None, detect_jsonl: bool
) -> None:
    """Show what the gateway would send for TEXT, and what it found (types and positions)."""
    from localgate.redaction.session import PolicyBlocked
    from localgate.redaction.stage import build_detector, new_session

    settings, _ = load_or_exit(config_path)
    policy = settings.redaction_for(tenant) if tenant else settings.proxy.redaction
    detector = build_detector(settings, policy)
    if detect_jsonl:
        for number, line in enumerate(sys.stdin, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                record_id, record_text = record["id"], record["text"]
            except (ValueError, KeyError, TypeError) as exc:
                click.echo(f'localgate: line {number}: expected {{"id", "text"}} JSON', err=True)
                raise SystemExit(1) from exc
            entities = [
                {"start": f.start, "end": f.end, "type": f.type}
                for f in detector.detect(str(record_text))
            ]
            click.echo(json.dumps({"id": record_id, "entities": entities}, ensure_ascii=False))
        return
    if text is None:
        text = sys.stdin.read()
    session = new_session(settings, policy, detector)
    findings = detector.detect(text)
    try:
        redacted = session.redact(text, "text")
    except PolicyBlocked as exc:
        click.echo(f"blocked: {exc.message}", err=True)
        raise SystemExit(2) from exc
    click.echo(redacted)
    for finding in findings:
        click.echo(
            f"  {finding.type:<18} {finding.start:>6}-{finding.end:<6} "
            f"{session.action_for(finding.type):<13} score {finding.score:.2f}",
            err=True,
        )


@main.group()
def keys() -> None:
    """Create, list and revoke tenant API keys."""


def _key_store(config_path: Path | None) -> Any:
    from localgate.identity import SqliteKeyStore

    settings, _ = load_or_exit(config_path)
    return SqliteKeyStore(settings.state_db_path)


@keys.command("create")
@config_option
@click.option("--tenant", required=True, help="Tenant the key belongs to.")
@click.option("--label", default="", help="Free-text note, e.g. the application using the key.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object for scripts.")
def keys_create(config_path: Path | None, tenant: str, label: str, as_json: bool) -> None:
    """Create a key; it is printed once and stored only as a hash."""
    store = _key_store(config_path)
    try:
        issued = store.create(tenant, label)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tenant") from exc
    finally:
        store.close()
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
    store = _key_store(config_path)
    try:
        records = store.list(tenant)
    finally:
        store.close()
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
    store = _key_store(config_path)
    try:
        found = store.revoke(key_id)
    finally:
        store.close()
    if not found:
        click.echo(f"localgate: no key with id {key_id}", err=True)
        sys.exit(1)
    click.echo(f"Revoked key {key_id}.")
