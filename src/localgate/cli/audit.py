"""``localgate audit``: verify, prove, inspect and maintain the audit trail."""

from __future__ import annotations

import getpass
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

import click

from localgate.admin.audit import AuditAdmin, check_proof
from localgate.adminapi.trail import AdminTrail
from localgate.audit.records import ADMIN_LOG
from localgate.cli.errors import reported
from localgate.cli.options import config_option, group_config_option, load_or_exit
from localgate.config import Settings
from localgate.errors import LocalgateError

__all__ = ["audit"]


def _admin(config_path: Path | None) -> AuditAdmin:
    return AuditAdmin(load_or_exit(config_path)[0])


# As the admin API asks of a decryption's reason (adminapi/models.py, DecryptRequest).
_REASON_MIN, _REASON_MAX = 8, 1000


def _reason(decrypt: bool, reason: str | None) -> str:
    """The stated reason for a decryption; a usage error without one."""
    text = (reason or "").strip()
    if not decrypt:
        if reason is not None:
            raise click.UsageError("--reason goes with --decrypt.")
        return ""
    if not text:
        raise click.UsageError(
            "--reason is required: every payload read is recorded, with who and why, in "
            f"the admin-action trail (audit log {ADMIN_LOG})."
        )
    if not _REASON_MIN <= len(text) <= _REASON_MAX:
        raise click.UsageError(
            f"--reason must say why in {_REASON_MIN} to {_REASON_MAX} characters."
        )
    return text


def _os_user() -> str:
    """Who runs the CLI: the OS user and the host, as the trail names them."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name in the environment or the password database
        user = f"uid {os.getuid()}"
    return f"os:{user}@{socket.gethostname()}"


@contextmanager
def _payload_access(
    settings: Settings, action: str, target: dict[str, Any], reason: str
) -> Iterator[None]:
    """Put a payload read on record in the admin-action trail before it happens (nothing is
    decrypted if the record cannot be made durable), and its failure after, if it fails."""
    try:
        # Never a new master key here: one made beside an existing store would open nothing.
        trail = AdminTrail.open(settings, create_keys=False)
    except (OSError, ValueError) as exc:
        raise click.ClickException(
            f"the admin-action trail cannot be opened, so nothing was read: {exc}"
        ) from exc
    actor = _os_user()
    try:
        trail.record_local(actor, action, target=target, reason=reason)
        try:
            yield
        except Exception as exc:
            status = exc.status_name if isinstance(exc, LocalgateError) else type(exc).__name__
            trail.record_local(actor, action, target=target, outcome=f"failed: {status}")
            raise
    finally:
        trail.close()


_reason_option = click.option(
    "--reason",
    default=None,
    help="Why the payloads are read (required with --decrypt): recorded, with the OS user, "
    f"in the admin-action trail (audit log {ADMIN_LOG}) before anything is decrypted.",
)


def _moment(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """``--now`` (UTC, ISO 8601), or None for the real time."""
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time", ctx, param) from exc


_now_option = click.option(
    "--now",
    callback=_moment,
    default=None,
    help="Pretend it is this UTC time (ISO 8601).",
)


@click.group()
@group_config_option
def audit() -> None:
    """Verify, prove, inspect and maintain the audit trail."""


@audit.command()
@config_option
@click.option("--tenant", default=None, help="Only this tenant's log.")
@click.option(
    "--checkpoints",
    "checkpoint_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The external anchor: signed checkpoints exported to this folder "
    "(default: audit.checkpoint_export_dir). Keep it where the DBA cannot write.",
)
@click.option("--key", default=None, help="Verifier key (default: from the signing key file).")
def verify(
    config_path: Path | None, tenant: str | None, checkpoint_dir: Path | None, key: str | None
) -> None:
    """Recompute every log; report OK or the first record that is wrong, and how."""
    with reported():
        result = _admin(config_path).verify(tenant, checkpoint_dir, key)
    if not result.signatures_checked:
        click.echo("note: no verifier key; checkpoint signatures are not checked", err=True)
    if result.anchor_dir is None:
        click.echo(
            "note: no anchor (audit.checkpoint_export_dir or --checkpoints): whoever can write "
            "the database can also delete what it holds of the checkpoints",
            err=True,
        )
    if result.anchor_missing is not None:
        click.echo(f"anchor: FAILED: {result.anchor_missing}")
    for problem in result.anchor_problems:
        click.echo(f"anchor: FAILED: {problem}")
    for report in result.reports:
        if report.ok:
            click.echo(
                f"{report.tenant}: OK ({report.records} records, {report.checkpoints} checkpoints)"
            )
            if report.unanswered:
                # Each one: a request in flight now, or one whose answer a crash cut off
                # (docs/audit.md, Durability, says which window that can be).
                click.echo(f"  {len(report.unanswered)} request(s) without a completion record:")
                for request_id in report.unanswered:
                    click.echo(f"    {request_id}")
        else:
            click.echo(f"{report.tenant}: FAILED: {report.problem}")
        for warning in report.warnings:
            click.echo(f"  warning: {warning}")
        for foreign in report.foreign:
            click.echo(f"  foreign checkpoint (ignored, anchors nothing): {foreign}")
    for foreign in result.foreign_lists:
        click.echo(f"foreign tenant list (ignored, anchors nothing): {foreign}")
    if any(report.foreign for report in result.reports) or result.foreign_lists:
        click.echo(
            "note: the database holds signed items the log's key did not sign: someone with "
            "write access inserted them, or a replica signed with another key "
            "(docs/shared-state.md); the log itself is judged by the valid ones",
            err=True,
        )
    if not result.ok:
        sys.exit(1)


@audit.command()
@config_option
def checkpoint(config_path: Path | None) -> None:
    """Sign the head of every log that grew (run where the signing key is)."""
    with reported():
        signed = _admin(config_path).checkpoint()
    for head in signed:
        click.echo(f"{head.tenant}: signed at {head.size} records")
    if not signed:
        click.echo("nothing new to sign")


@audit.command("verifier-key")
@config_option
def verifier_key(config_path: Path | None) -> None:
    """Print the public key auditors use to check checkpoints and proofs."""
    with reported():
        click.echo(_admin(config_path).verifier_key())


@audit.command()
@config_option
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Directory to write master.key, signing.key and seal.key into (created owner-only).",
)
def keygen(config_path: Path | None, out: Path) -> None:
    """Make the keys replicas that share one database must all hold.

    Give every replica the same master.key (audit.master_key_file, or its content in
    LOCALGATE_AUDIT_MASTER_KEY), the same seal.key (proxy.signature_key_file, or its content
    in LOCALGATE_SIGNATURE_KEY), and the replicas that may sign checkpoints signing.key
    (audit.signing_key_file). docs/shared-state.md says how.
    """
    with reported():
        keys = _admin(config_path).generate_keys(out)
    click.echo(f"master key {keys.master_key_id}: {keys.master_key_file}")
    click.echo(f"signing key: {keys.signing_key_file}")
    click.echo(f"verifier key (public, for auditors): {keys.verifier_key}")
    click.echo(f"thought-signature seal key: {keys.seal_key_file}")


@audit.command()
@config_option
@click.option("--request-id", required=True)
@click.option("--decrypt", is_flag=True, help="Decrypt payloads (needs the master key).")
@_reason_option
def show(config_path: Path | None, request_id: str, decrypt: bool, reason: str | None) -> None:
    """Show the records of one request as JSON.

    With --decrypt, the read is recorded first (who, why, which request) in the
    admin-action trail, as a decryption through the admin API is.
    """
    why = _reason(decrypt, reason)
    settings = load_or_exit(config_path)[0]
    admin = AuditAdmin(settings)
    with reported():
        records = admin.records(request_id)
        if decrypt:
            target = {"request_id": request_id, "tenants": sorted({r.tenant for r in records})}
            with _payload_access(settings, "audit.decrypt", target, why):
                records = admin.records(request_id, decrypt=True)
    for record in records:
        click.echo(json.dumps(record.as_json(), ensure_ascii=False, indent=2))


@audit.command()
@config_option
@click.option("--tenant", default=None)
@click.option("--decrypt", is_flag=True, help="Decrypt payloads (needs the master key).")
@_reason_option
def export(config_path: Path | None, tenant: str | None, decrypt: bool, reason: str | None) -> None:
    """Every record as JSON lines (for a SIEM).

    With --decrypt, the read is recorded first (who, why, which tenants) in the
    admin-action trail.
    """
    why = _reason(decrypt, reason)
    settings = load_or_exit(config_path)[0]
    admin = AuditAdmin(settings)
    with reported():
        if not decrypt:
            for record in admin.export(tenant):
                click.echo(json.dumps(record.as_json(), ensure_ascii=False))
            return
        tenants = [tenant] if tenant else sorted(admin.tenants() - {ADMIN_LOG})
        with _payload_access(settings, "audit.export", {"tenants": tenants}, why):
            for record in admin.export(tenant, decrypt=True):
                click.echo(json.dumps(record.as_json(), ensure_ascii=False))


@audit.command()
@config_option
@click.option("--request-id", required=True)
@click.option("--kind", type=click.Choice(["request", "answer"]), default="request")
def prove(config_path: Path | None, request_id: str, kind: str) -> None:
    """An inclusion proof for one record, checkable offline with `audit check-proof`."""
    record_kind = cast(Literal["request", "answer"], kind)
    with reported():
        proof = _admin(config_path).prove(request_id, record_kind)
    click.echo(json.dumps(proof.as_json(), indent=2))


@audit.command("check-proof")
@config_option
@click.argument("proof_file", type=click.File("r"))
@click.option("--key", required=True, help="The log's verifier key (from `audit verifier-key`).")
def check_proof_command(config_path: Path | None, proof_file: Any, key: str) -> None:
    """Check a proof offline: only the proof file and the public key are needed.

    --config is accepted as on every command; the check reads no configuration.
    """
    checked = check_proof(proof_file.read(), key)
    if not checked.valid:
        click.echo(f"INVALID: {checked.problem}")
        sys.exit(1)
    signed_at = checked.signed_at.isoformat() if checked.signed_at else None
    click.echo(
        f"OK: {checked.kind} record {checked.seq} of tenant {checked.tenant} "
        f"(request {checked.request_id}, {checked.time}) is in the log signed by "
        f"{checked.origin} at size {checked.size} on {signed_at}"
    )


@audit.command("rotate-key")
@config_option
@click.option(
    "--new-key-file",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="File with the new master key (created if missing).",
)
def rotate_key(config_path: Path | None, new_key_file: Path) -> None:
    """Re-wrap every data key under a new master key; records are not rewritten."""
    with reported():
        rotation = _admin(config_path).rotate_master_key(new_key_file)
    click.echo(
        f"re-wrapped {rotation.rewrapped} data keys under master key {rotation.master_key_id}. "
        f"Point audit.master_key_file (or LOCALGATE_AUDIT_MASTER_KEY) at {new_key_file} and "
        "restart; keep the old key until then."
    )


@audit.command()
@config_option
@_now_option
def shred(config_path: Path | None, now: datetime | None) -> None:
    """Destroy data keys whose retention has ended (crypto-shredding)."""
    with reported():
        destroyed = _admin(config_path).shred(now)
    click.echo(f"destroyed {len(destroyed)} data key(s)")


@audit.command()
@config_option
@_now_option
def purge(config_path: Path | None, now: datetime | None) -> None:
    """Erase metadata past audit.metadata_retention_days, leaving signed purge markers."""
    with reported():
        outcomes = _admin(config_path).purge(now)
    for outcome in outcomes:
        if outcome.refused is None:
            click.echo(
                f"{outcome.tenant}: metadata of records 0..{outcome.below - 1} purged "
                "(signed marker appended)"
            )
        else:
            click.echo(f"{outcome.tenant}: NOT PURGED: {outcome.refused}")
    if not outcomes:
        click.echo("nothing past the retention period")
    if any(outcome.refused is not None for outcome in outcomes):
        sys.exit(1)


@audit.command("find-prompt")
@config_option
@click.option("--tenant", required=True)
@click.argument("texts", nargs=-1, required=True)
@click.option(
    "--reason",
    default=None,
    help="Why (required): recorded, with the OS user, in the admin-action trail (audit log "
    f"{ADMIN_LOG}) before the comparison; the texts themselves are not recorded.",
)
def find_prompt(
    config_path: Path | None, tenant: str, texts: tuple[str, ...], reason: str | None
) -> None:
    """Which requests sent exactly these texts (compared by HMAC; nothing is decrypted).

    It tells whether a text was in a tenant's prompts, so it is a payload access: it needs
    --reason and is recorded in the admin-action trail first.
    """
    why = _reason(True, reason)
    settings = load_or_exit(config_path)[0]
    target = {"tenant": tenant, "texts": len(texts)}
    with reported(), _payload_access(settings, "audit.find-prompt", target, why):
        found = AuditAdmin(settings).find_prompt(tenant, texts)
    for match in found:
        click.echo(f"{match.request_id}  {match.time}")
    if not found:
        click.echo("no request sent these texts")
        sys.exit(1)


@audit.command()
@config_option
@click.option("--tenant", required=True, help="The tenant whose log the report covers.")
@click.option(
    "--from", "start", required=True, help="First day (YYYY-MM-DD) or UTC time of the period."
)
@click.option(
    "--to", "end", required=True, help="Last day (included) or UTC time (excluded) of the period."
)
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="The file to write (report.html, report.pdf).",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["html", "pdf"]),
    default=None,
    help="html or pdf (default: from --out's suffix, else html).",
)
@click.option(
    "--checkpoints",
    "checkpoint_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The external anchor (default: audit.checkpoint_export_dir).",
)
@click.option("--key", default=None, help="Verifier key (default: from the signing key file).")
def report(
    config_path: Path | None,
    tenant: str,
    start: str,
    end: str,
    out: Path,
    output_format: str | None,
    checkpoint_dir: Path | None,
    key: str | None,
) -> None:
    """The auditor's report of one tenant and period: one self-contained HTML or PDF file.

    Verification, requests by outcome/model/route/upstream, redaction findings, refusals,
    retention, configuration versions and the MLPS 2.0 / PIPL evidence mapping; counts, ids
    and hashes only (docs/audit.md, "The auditor's report").
    """
    from localgate import __version__
    from localgate.admin.audit_report import collect, period_bounds
    from localgate.admin.audit_report_html import (  # matplotlib: slow to import
        Rendering,
        render_html,
        render_pdf,
    )

    chosen = output_format or ("pdf" if out.suffix.lower() == ".pdf" else "html")
    try:
        first, last = period_bounds(start, end)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--from/--to") from exc
    with reported():
        figures = collect(
            _admin(config_path),
            tenant,
            first,
            last,
            verifier_key=key,
            checkpoint_dir=checkpoint_dir,
        )
    command = f"localgate audit report --tenant {tenant} --from {start} --to {end}"
    command += f" --format {chosen}"
    if checkpoint_dir is not None:
        command += f" --checkpoints {checkpoint_dir}"
    if key is not None:
        command += f" --key {key}"
    html = render_html(figures, Rendering(command, __version__, datetime.now(UTC)))
    if chosen == "pdf":
        try:
            out.write_bytes(render_pdf(html))
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from exc
    else:
        out.write_text(html, encoding="utf-8")
    verdict = "verified" if figures.verified else "VERIFICATION FAILED"
    trail = "verified" if figures.admin_trail_verified else "VERIFICATION FAILED"
    click.echo(
        f"{out}: {len(figures.requests)} requests of {tenant}, {first.isoformat()} to "
        f"{last.isoformat()}; log {verdict}; {len(figures.access)} payload access record(s), "
        f"admin-action trail {trail}"
    )
    if not (figures.verified and figures.admin_trail_verified):
        sys.exit(1)  # the report is written, and says why; scripts see it as `verify` does
