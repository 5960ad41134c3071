"""``localgate audit``: verify, prove, inspect and maintain the audit trail."""

from __future__ import annotations

import base64
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from localgate.audit.anchor import read_anchor
from localgate.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointSigner,
    CheckpointVerifier,
)
from localgate.audit.crypto import CipherSuite, DecryptionError, MasterKey
from localgate.audit.keyring import Keyring
from localgate.audit.merkle import inclusion_proof, verify_inclusion
from localgate.audit.records import parse_header
from localgate.audit.retention import shred_expired
from localgate.audit.store import AuditReader, StoredRecord, associated_data
from localgate.audit.trail import database, master_key, signer
from localgate.audit.verify import verify_all
from localgate.cli.options import config_option, load_or_exit
from localgate.config import Settings

__all__ = ["audit"]


def _settings(ctx: click.Context) -> Settings:
    settings: Settings = ctx.obj
    return settings


def _reader(settings: Settings) -> AuditReader:
    if settings.audit.store == "sqlite" and not settings.audit_db_path.exists():
        raise click.ClickException(f"no audit log at {settings.audit_db_path}")
    return AuditReader(database(settings)())


def _suite(reader: AuditReader) -> CipherSuite:
    row = reader.db.execute("SELECT value FROM audit_meta WHERE name='suite'").fetchone()
    return CipherSuite("sm" if row and row[0] == "sm" else "standard")


def _verifier(settings: Settings, key: str | None) -> CheckpointVerifier | None:
    if key:
        return CheckpointVerifier.from_key_string(key)
    own = signer(settings, create=False)
    return CheckpointVerifier.from_key_string(own.verifier_key()) if own else None


def _now(text: str | None) -> datetime:
    """``--now`` (UTC, ISO 8601), or the real time."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC) if text else datetime.now(UTC)


def _required_signer(settings: Settings) -> CheckpointSigner:
    """The signing key (checkpoints and purge markers are signed), or a clear error."""
    key = signer(settings, create=False)
    if key is None:
        raise click.ClickException(
            f"cannot read the signing key {settings.audit_signing_key_path}; run this where "
            "the key is (audit.signing_key_file)"
        )
    return key


@click.group()
@config_option
@click.pass_context
def audit(ctx: click.Context, config_path: Path | None) -> None:
    """Verify, prove, inspect and maintain the audit trail."""
    ctx.obj = load_or_exit(config_path)[0]


@audit.command()
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
@click.pass_context
def verify(
    ctx: click.Context, tenant: str | None, checkpoint_dir: Path | None, key: str | None
) -> None:
    """Recompute every log; report OK or the first record that is wrong, and how."""
    settings = _settings(ctx)
    reader = _reader(settings)
    suite = _suite(reader)
    verifier = _verifier(settings, key)
    if verifier is None:
        click.echo("note: no verifier key; checkpoint signatures are not checked", err=True)
    folder = checkpoint_dir or settings.audit.checkpoint_export_dir
    anchor = None
    failed = False
    if folder is None:
        click.echo(
            "note: no anchor (audit.checkpoint_export_dir or --checkpoints): whoever can write "
            "the database can also delete what it holds of the checkpoints",
            err=True,
        )
    else:
        try:
            anchor = read_anchor(folder, verifier, settings.audit.log_name)
        except FileNotFoundError as exc:
            # An anchor that vanished is not an empty one, unless nothing was signed yet.
            if checkpoint_dir is not None or any(
                reader.checkpoints(name) for name in reader.known_tenants()
            ):
                click.echo(f"anchor: FAILED: {exc}")
                failed = True
    result = verify_all(reader, suite, verifier, anchor, tenant)
    reader.close()
    for problem in result.anchor_problems:
        failed = True
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
            failed = True
            click.echo(f"{report.tenant}: FAILED: {report.problem}")
        for warning in report.warnings:
            click.echo(f"  warning: {warning}")
    if failed:
        sys.exit(1)


@audit.command()
@click.pass_context
def checkpoint(ctx: click.Context) -> None:
    """Sign the head of every log that grew (run where the signing key is)."""
    from localgate.audit.checkpointing import Checkpointer
    from localgate.audit.migrate import upgrade_schema

    settings = _settings(ctx)
    key = _required_signer(settings)
    reader = _reader(settings)
    # It writes (checkpoints, tenant lists), maybe before any upgraded gateway has started.
    upgrade_schema(reader.db.sqlalchemy_url)
    suite = _suite(reader)
    made = Checkpointer(
        reader,
        suite.tree_hasher(),
        key,
        settings.audit.log_name,
        settings.audit.checkpoint_export_dir,
    ).run()
    reader.close()
    for tenant, size in made:
        click.echo(f"{tenant}: signed at {size} records")
    if not made:
        click.echo("nothing new to sign")


@audit.command("verifier-key")
@click.pass_context
def verifier_key(ctx: click.Context) -> None:
    """Print the public key auditors use to check checkpoints and proofs."""
    settings = _settings(ctx)
    key = _required_signer(settings)
    click.echo(key.verifier_key())


def _record_json(
    record: StoredRecord, keyring: Keyring | None, suite: CipherSuite
) -> dict[str, Any]:
    header = parse_header(record.header) if record.header else {}
    out: dict[str, Any] = {"tenant": record.tenant, "seq": record.seq, "header": header}
    if keyring is None:
        return out
    for column, purpose in ((record.payload, "payload"), (record.original, "prompt")):
        if column is None:
            continue
        name = "payload" if purpose == "payload" else "original_prompt"
        try:
            key = keyring.by_id(header[f"{purpose}_key"])
            plain = suite.decrypt(key, column, associated_data(record.tenant, record.seq, purpose))
            out[name] = json.loads(plain)
        except DecryptionError as exc:
            out[name] = {"unavailable": str(exc)}
    return out


def _keyring(settings: Settings, reader: AuditReader, decrypt: bool) -> Keyring | None:
    if not decrypt:
        return None
    try:
        master = master_key(settings, create=False)
    except (FileNotFoundError, PermissionError, ValueError) as exc:
        raise click.ClickException(f"decrypting needs the audit master key: {exc}") from exc
    return Keyring(reader.db, master, _suite(reader))


@audit.command()
@click.option("--request-id", required=True)
@click.option("--decrypt", is_flag=True, help="Decrypt payloads (needs the master key).")
@click.pass_context
def show(ctx: click.Context, request_id: str, decrypt: bool) -> None:
    """Show the records of one request as JSON."""
    settings = _settings(ctx)
    reader = _reader(settings)
    records = reader.by_request(request_id)
    if not records:
        raise click.ClickException(f"no audit record for request {request_id}")
    keyring = _keyring(settings, reader, decrypt)
    suite = _suite(reader)
    for record in records:
        click.echo(json.dumps(_record_json(record, keyring, suite), ensure_ascii=False, indent=2))
    reader.close()


@audit.command()
@click.option("--tenant", default=None)
@click.option("--decrypt", is_flag=True, help="Decrypt payloads (needs the master key).")
@click.pass_context
def export(ctx: click.Context, tenant: str | None, decrypt: bool) -> None:
    """Every record as JSON lines (for a SIEM)."""
    settings = _settings(ctx)
    reader = _reader(settings)
    keyring = _keyring(settings, reader, decrypt)
    suite = _suite(reader)
    for name in [tenant] if tenant else reader.tenants():
        for record in reader.records(name):
            click.echo(json.dumps(_record_json(record, keyring, suite), ensure_ascii=False))
    reader.close()


@audit.command()
@click.option("--request-id", required=True)
@click.option("--kind", type=click.Choice(["request", "answer"]), default="request")
@click.pass_context
def prove(ctx: click.Context, request_id: str, kind: str) -> None:
    """An inclusion proof for one record, checkable offline with `audit check-proof`."""
    settings = _settings(ctx)
    reader = _reader(settings)
    suite = _suite(reader)
    hasher = suite.tree_hasher()
    matches = [r for r in reader.by_request(request_id) if r.kind == kind]
    if not matches or matches[0].header is None:
        raise click.ClickException(f"no {kind} record for request {request_id}")
    record = matches[0]
    header = matches[0].header
    signed = [(size, note) for size, note in reader.checkpoints(record.tenant) if size > record.seq]
    if not signed:
        raise click.ClickException(
            "no signed checkpoint covers this record yet; run 'localgate audit checkpoint'"
        )
    size, note = signed[0]
    leaves = reader.leaf_hashes(record.tenant, size)
    proof = inclusion_proof(hasher, record.seq, leaves)
    reader.close()
    click.echo(
        json.dumps(
            {
                "suite": suite.name,
                "tenant": record.tenant,
                "seq": record.seq,
                "header": base64.b64encode(header).decode(),
                "checkpoint": note,
                "proof": [base64.b64encode(node).decode() for node in proof],
            },
            indent=2,
        )
    )


@audit.command("check-proof")
@click.argument("proof_file", type=click.File("r"))
@click.option("--key", required=True, help="The log's verifier key (from `audit verifier-key`).")
def check_proof(proof_file: Any, key: str) -> None:
    """Check a proof offline: only the proof file and the public key are needed."""
    try:
        data = json.load(proof_file)
        verifier = CheckpointVerifier.from_key_string(key)
        checkpoint: Checkpoint = verifier.verify(data["checkpoint"])
        header = base64.b64decode(data["header"])
        proof = [base64.b64decode(node) for node in data["proof"]]
        hasher = CipherSuite(data["suite"]).tree_hasher()
    except (CheckpointError, KeyError, ValueError) as exc:
        click.echo(f"INVALID: {exc}")
        sys.exit(1)
    fields = parse_header(header)
    included = verify_inclusion(
        hasher, data["seq"], checkpoint.size, hasher.hash_leaf(header), proof, checkpoint.root
    )
    if not included or fields.get("seq") != data["seq"]:
        click.echo("INVALID: the record is not in the signed log")
        sys.exit(1)
    click.echo(
        f"OK: {fields.get('kind')} record {data['seq']} of tenant {fields.get('tenant')} "
        f"(request {fields.get('request_id')}, {fields.get('time')}) is in the log signed by "
        f"{checkpoint.origin} at size {checkpoint.size} on {checkpoint.time.isoformat()}"
    )


@audit.command("rotate-key")
@click.option(
    "--new-key-file",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="File with the new master key (created if missing).",
)
@click.pass_context
def rotate_key(ctx: click.Context, new_key_file: Path) -> None:
    """Re-wrap every data key under a new master key; records are not rewritten."""
    from localgate.audit.crypto import load_or_create_master_key

    settings = _settings(ctx)
    reader = _reader(settings)
    old = master_key(settings, create=False)
    new: MasterKey = load_or_create_master_key(None, new_key_file, create=True)
    rows = reader.db.execute(
        "SELECT key_id, wrapped FROM audit_keys WHERE wrapped IS NOT NULL"
    ).fetchall()
    reader.db.begin()
    for key_id, wrapped in rows:
        reader.db.execute(
            "UPDATE audit_keys SET wrapped=?, master_key_id=? WHERE key_id=?",
            (new.wrap(old.unwrap(wrapped, key_id), key_id), new.key_id, key_id),
        )
    reader.db.commit()
    reader.close()
    click.echo(
        f"re-wrapped {len(rows)} data keys under master key {new.key_id}. Point "
        f"audit.master_key_file (or LOCALGATE_AUDIT_MASTER_KEY) at {new_key_file} and "
        "restart; keep the old key until then."
    )


@audit.command()
@click.option("--now", "now_text", default=None, help="Pretend it is this UTC time (ISO 8601).")
@click.pass_context
def shred(ctx: click.Context, now_text: str | None) -> None:
    """Destroy data keys whose retention has ended (crypto-shredding)."""
    settings = _settings(ctx)
    reader = _reader(settings)
    now = _now(now_text)
    destroyed = shred_expired(reader, settings.audit, now)
    reader.close()
    click.echo(f"destroyed {len(destroyed)} data key(s)")


@audit.command()
@click.option("--now", "now_text", default=None, help="Pretend it is this UTC time (ISO 8601).")
@click.pass_context
def purge(ctx: click.Context, now_text: str | None) -> None:
    """Erase metadata past audit.metadata_retention_days, leaving signed purge markers."""
    from localgate.audit.retention import purge_tenants
    from localgate.audit.store import AuditStore

    settings = _settings(ctx)
    key = _required_signer(settings)
    reader = _reader(settings)
    store = AuditStore(database(settings), master_key(settings, create=False), _suite(reader))
    store.start()
    now = _now(now_text)
    try:
        outcomes = purge_tenants(store, reader, settings.audit, key, now)
    finally:
        store.close()
        reader.close()
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
@click.option("--tenant", required=True)
@click.argument("texts", nargs=-1, required=True)
@click.pass_context
def find_prompt(ctx: click.Context, tenant: str, texts: tuple[str, ...]) -> None:
    """Which requests sent exactly these texts (compared by HMAC; nothing is decrypted)."""
    settings = _settings(ctx)
    reader = _reader(settings)
    suite = _suite(reader)
    keyring = Keyring(reader.db, master_key(settings, create=False), suite)
    _, mac_key = keyring.current(tenant, "hmac", "-")
    wanted = suite.mac(mac_key, "\n".join(texts).encode()).hex()
    found = 0
    for record in reader.records(tenant):
        header = parse_header(record.header) if record.header else {}
        if header.get("prompt_hmac") == wanted:
            found += 1
            click.echo(f"{header.get('request_id')}  {header.get('time')}")
    reader.close()
    if not found:
        click.echo("no request sent these texts")
        sys.exit(1)
