"""The ``localgate`` command: serve, check a configuration, redact; the command groups.

Each group lives in a module of its own (``keys``, ``tenants``, ``audit``, ``cache``, ``rag``)
and is a thin layer over an admin service (``localgate.admin``): it parses, calls, formats.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from localgate import __version__
from localgate.cli.options import config_option, load_or_exit

if TYPE_CHECKING:
    from localgate.config import Settings
    from localgate.frontdoor.tls import ServerTls

__all__ = ["PID_FILE", "main"]

# In the data directory: the process id of the gateway `localgate serve` runs.
PID_FILE = "localgate.pid"

# Command groups imported only when used: the audit store and the vector layer take about a
# second to import, which `localgate --help` and `localgate keys list` should not pay, and
# each group pays only for the service it calls.
# name -> (module, attribute, the one-line help shown in `localgate --help`)
_LAZY_GROUPS = {
    "admin": (
        "localgate.cli.admin",
        "admin",
        "The admin API's operators: API tokens and local users, with their roles.",
    ),
    "keys": ("localgate.cli.keys", "keys", "Create, list and revoke tenant API keys."),
    "tenants": (
        "localgate.cli.tenants",
        "tenants",
        "The tenants in the configuration and the key store, with their effective policy.",
    ),
    "audit": (
        "localgate.cli.audit",
        "audit",
        "Verify, prove, inspect and maintain the audit trail.",
    ),
    "cache": (
        "localgate.cli.cache",
        "cache",
        "The local answer cache: what it holds, and clearing it.",
    ),
    "rag": (
        "localgate.cli.rag",
        "rag",
        "Local retrieval: ingest documents, search them, list and delete collections.",
    ),
    "quality": (
        "localgate.cli.quality",
        "quality",
        "Quality signals of a running gateway: drift and low-confidence answers.",
    ),
    "doctor": (
        "localgate.cli.doctor",
        "doctor",
        "Check this host: configuration, files, keys, database, vector store, upstream.",
    ),
    "migrate": (
        "localgate.cli.migrate",
        "migrate",
        "Apply the pending schema migrations of the configured databases, then exit.",
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
@click.option("--debug", is_flag=True, help="Debug logging; tracebacks for start-up errors.")
@click.option(
    "--workers",
    default=None,
    metavar="N|auto",
    help="Processes serving the port, one event loop each; auto: one per core "
    "(default: server.workers, 1). docs/workers.md",
)
@click.option(
    "--admin-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port of the admin API (default: admin.port); 0 turns it off.",
)
def serve(
    config_path: Path | None,
    host: str | None,
    port: int | None,
    debug: bool,
    workers: str | None,
    admin_port: int | None,
) -> None:
    """Run the gateway."""

    import uvicorn

    from localgate.app import create_app, server_options
    from localgate.frontdoor.tls import tls_server_options
    from localgate.workers import serve_workers, shared_state_problems, worker_from_environment

    settings, source = load_or_exit(config_path)
    worker = worker_from_environment()
    count = 1 if worker is not None else _worker_count(workers, settings.server.workers)
    logging.basicConfig(
        level="DEBUG" if debug else settings.logging.level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not debug:
        from localgate.cli.quiet import OneLineStartupErrors

        logging.getLogger("uvicorn.error").addFilter(OneLineStartupErrors())
    bind_host = host or settings.server.host
    bind_port = settings.server.port if port is None else port
    tls = _server_tls_or_exit(settings)
    logging.getLogger("localgate").info(
        "localgate %s: config %s, data in %s, upstream %s, listening on %s://%s:%d",
        __version__,
        source or "<defaults>",
        settings.data_dir,
        settings.upstream.base_url,
        "http" if tls is None else "https",
        bind_host,
        bind_port,
    )
    # The configuration's own contradictions first: they do not depend on the machine
    # (what holds the port, whether the database answers) and no restart clears them.
    for problem in shared_state_problems(settings, count):
        click.echo(f"localgate: cannot start: {problem}", err=True)
        sys.exit(1)
    if worker is None:  # a worker's supervisor checked, and holds the port
        from localgate.cli.startup import startup_problems

        # One line each, before the server starts (database, keys, port):
        # docs/shared-state.md.
        problems = startup_problems(settings, bind_host, bind_port, debug=debug)
        if problems:
            for problem in problems:
                click.echo(f"localgate: cannot start: {problem}", err=True)
            sys.exit(1)
    if count > 1:
        pid_file = settings.data_dir / PID_FILE
        sys.exit(serve_workers(settings, source, bind_host, bind_port, count, pid_file))
    from localgate.adminapi.listener import (
        AdminListenerError,
        GatewayLink,
        admin_listener,
        run_beside,
    )
    from localgate.app.drain import Drain, DrainingServer

    drain = Drain()
    link = GatewayLink()  # the admin API's view of this gateway, once started
    config = uvicorn.Config(
        create_app(
            settings,
            source,
            # `localgate reload` finds the gateway by its pid file and signals it (SIGHUP);
            # with several workers, the file names their supervisor, which passes it on.
            pid_file=settings.data_dir / PID_FILE if worker is None else None,
            drain=drain,
            tls=tls,
            worker=worker.slot if worker is not None else None,
            on_started=link.attach,
        ),
        host=bind_host,
        port=bind_port,
        log_config=None,
        log_level=settings.logging.level,
        **server_options(settings),
        **tls_server_options(tls),
    )
    delay_s = settings.server.drain_delay_s
    if worker is not None and worker.slot.index != 0:
        admin_port = 0  # with several workers, the first one serves the admin API
    try:
        admin = admin_listener(
            settings, source, admin_port, tls_server_options(tls), data_port=bind_port, link=link
        )
    except AdminListenerError as exc:
        click.echo(f"localgate: cannot start: {exc}", err=True)
        sys.exit(1)
    if worker is None:
        server = DrainingServer(config, drain, delay_s)
        run_beside(server, admin)
    else:
        server = worker.server(config, drain, delay_s)
        run_beside(server, admin, sockets=[worker.listener()])
    if not server.started:
        sys.exit(3)  # the port in use, the app's start-up failed: logged above


def _server_tls_or_exit(settings: Settings) -> ServerTls | None:
    """The server's TLS (None: plain HTTP) and the upstreams' egress files checked; a
    file that cannot be used stops the start with one line naming its setting."""
    import os

    from localgate.frontdoor.tls import ServerTls, TlsFileError
    from localgate.upstream.egress import egress_problems

    problems = egress_problems(settings, os.environ)
    tls = None
    if settings.server.tls_cert_file is not None:
        try:
            tls = ServerTls(settings.server)
        except TlsFileError as exc:
            problems.insert(0, str(exc))
    if problems:
        for problem in problems:
            click.echo(f"localgate: cannot start: {problem}", err=True)
        sys.exit(1)
    return tls


def _worker_count(option: str | None, configured: int | str) -> int:
    """``--workers`` (a number or auto), else ``server.workers``."""
    from localgate.config import resolve_workers

    if option is None:
        return resolve_workers(configured)
    if option != "auto" and not (option.isdigit() and int(option) >= 1):
        raise click.BadParameter(
            "a number of processes (1 or more) or auto", param_hint="--workers"
        )
    return resolve_workers(option)


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
@click.option(
    "--connect",
    is_flag=True,
    help="Also reach what it names: audit database and keys, vector store, upstream.",
)
def check(config_path: Path | None, connect: bool) -> None:
    """Validate a configuration; print every problem with its field path."""
    from localgate.cli.routing import describe_routes

    settings, source = load_or_exit(config_path)
    click.echo(f"{source or '<defaults>'}: OK")
    if settings.upstream_api_key is None and not connect:
        click.echo(
            "note: no upstream API key (GEMINI_API_KEY or upstream.api_key_file); "
            "the gateway will start but refuse to forward"
        )
    for name, keys in settings.upstream_keys.items():
        if not keys and settings.upstreams[name].kind == "gemini":
            click.echo(f"note: upstream '{name}' has no API key; requests to it are refused")
    for line in describe_routes(settings):
        click.echo(line)
    if connect:
        from localgate.admin.doctor import Doctor
        from localgate.cli.doctor import print_checks

        print_checks(Doctor(settings).run(connectivity_only=True), as_json=False)


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


@main.command()
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the document to this file (default: print it).",
)
@click.option(
    "--dialect",
    type=click.Choice(["gemini", "openai"]),
    default="gemini",
    help="gemini: the Gemini routes (/openapi.json); openai: the OpenAI-compatible routes "
    "(/openapi/openai.json).",
)
def openapi(out: Path | None, dialect: str) -> None:
    """Print the data plane's OpenAPI 3.1 document (as served at /openapi.json)."""
    from localgate.gemini.openapi import openapi_document
    from localgate.openai.openapi import openai_document

    document = openai_document() if dialect == "openai" else openapi_document()
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if out is None:
        click.echo(text, nl=False)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    click.echo(f"wrote {out}")
