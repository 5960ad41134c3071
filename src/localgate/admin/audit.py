"""The audit trail for auditors and operators: verify, sign, prove, inspect and maintain it.

Every method opens its own read connection and closes it before returning (``export``:
when the iteration ends), so one ``AuditAdmin`` can serve many calls. ``check_proof``
needs no configuration at all: only a proof and the log's public key.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from localgate.admin.audit_search import open_reader
from localgate.audit.anchor import Anchor, read_anchor
from localgate.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointSigner,
    CheckpointVerifier,
    note_text,
    write_key_file,
)
from localgate.audit.checkpointing import Checkpointer
from localgate.audit.crypto import (
    CipherSuite,
    DecryptionError,
    MasterKey,
    load_or_create_master_key,
)
from localgate.audit.keyring import Keyring
from localgate.audit.merkle import inclusion_proof, verify_inclusion
from localgate.audit.migrate import upgrade_schema
from localgate.audit.records import parse_header
from localgate.audit.retention import PurgeOutcome, purge_tenants, shred_expired
from localgate.audit.store import AuditReader, AuditStore, StoredRecord, associated_data
from localgate.audit.trail import database, master_key, remember_master_key, signer
from localgate.audit.verify import TenantReport, VerifyProgress, verify_all
from localgate.config import Settings
from localgate.errors import FailedPrecondition, InvalidArgument, NotFound
from localgate.secret import load_or_create_key

__all__ = [
    "BUNDLE_FORMAT",
    "AuditAdmin",
    "AuditRecord",
    "AuditVerification",
    "InclusionProof",
    "KeyRotation",
    "PromptMatch",
    "ProofCheck",
    "PurgeOutcome",
    "SignedHead",
    "TenantReport",
    "check_proof",
]

RecordKind = Literal["request", "answer"]


@dataclass(frozen=True, slots=True)
class AuditVerification:
    """What ``AuditAdmin.verify`` found: per tenant, and about the anchor."""

    signatures_checked: bool  # False: no verifier key, checkpoint signatures were not checked
    anchor_dir: Path | None  # the external anchor compared against; None: none configured
    anchor_missing: str | None  # the anchor folder could not be read, though it should be
    anchor_problems: list[str]  # what in the anchor itself does not verify
    reports: list[TenantReport]
    # Tenant lists in the database not signed by the log's key: reported, they anchor nothing.
    foreign_lists: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every tenant's log and the anchor verified."""
        return (
            self.anchor_missing is None
            and not self.anchor_problems
            and all(report.ok for report in self.reports)
        )


@dataclass(frozen=True, slots=True)
class SignedHead:
    """A tenant's log head that ``checkpoint`` signed."""

    tenant: str
    size: int


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """A stored record: its header and, when asked and possible, its decrypted contents."""

    tenant: str
    seq: int
    header: dict[str, Any]  # empty once the record's metadata was purged
    # "payload" and "original_prompt" when decrypted: the JSON stored, or
    # {"unavailable": reason} when its key was destroyed or does not open it.
    decrypted: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        """The record as ``localgate audit show`` and ``export`` print it."""
        return {"tenant": self.tenant, "seq": self.seq, "header": self.header, **self.decrypted}


BUNDLE_FORMAT = "localgate-proof-bundle/1"
# The ciphertexts a bundle may carry, as stored, and the header field of each one's digest.
_CIPHERTEXTS = {"payload": "payload_digest", "prompt": "prompt_digest"}


@dataclass(frozen=True, slots=True)
class InclusionProof:
    """That a record is in its tenant's log as a signed checkpoint fixed it: the proof
    bundle (docs/audit.md, "Proof bundles"), everything an outsider needs to check it."""

    suite: str
    tenant: str
    seq: int  # the leaf index
    header: bytes  # the record's leaf: its canonical header
    checkpoint: str  # the signed note of the first checkpoint covering it
    proof: list[bytes]  # the Merkle audit path from the leaf to the checkpoint's root
    origin: str = ""  # the checkpoint's origin line (the log's name)
    tree_size: int = 0  # the checkpoint's tree size
    root: bytes = b""  # the checkpoint's root hash
    leaf_hash: bytes = b""  # H(0x00 || header)
    # The record's ciphertexts as stored (encrypted; their digests are in the header).
    ciphertexts: dict[str, bytes] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The proof bundle, as ``check_proof`` reads it."""
        return {
            "format": BUNDLE_FORMAT,
            "suite": self.suite,
            "origin": self.origin,
            "tenant": self.tenant,
            "seq": self.seq,
            "leaf_index": self.seq,
            "tree_size": self.tree_size,
            "header": base64.b64encode(self.header).decode(),
            "leaf_hash": base64.b64encode(self.leaf_hash).decode(),
            "proof": [base64.b64encode(node).decode() for node in self.proof],
            "root": base64.b64encode(self.root).decode(),
            "checkpoint": self.checkpoint,
            "ciphertexts": {
                name: base64.b64encode(data).decode() for name, data in self.ciphertexts.items()
            },
        }


@dataclass(frozen=True, slots=True)
class ProofCheck:
    """The verdict on a proof; what it proves when valid, why not otherwise."""

    valid: bool
    problem: str | None = None
    kind: str | None = None
    seq: int | None = None
    tenant: str | None = None
    request_id: str | None = None
    time: str | None = None
    origin: str | None = None  # the log that signed the checkpoint
    size: int | None = None  # the log's size at that checkpoint
    signed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class GeneratedKeys:
    """What ``generate_keys`` wrote: three key files, and what identifies the keys."""

    master_key_file: Path
    signing_key_file: Path
    master_key_id: str
    verifier_key: str
    seal_key_file: Path


@dataclass(frozen=True, slots=True)
class KeyRotation:
    """What ``rotate_master_key`` did."""

    rewrapped: int  # data keys now wrapped under the new master key
    master_key_id: str


@dataclass(frozen=True, slots=True)
class PromptMatch:
    """A request whose prompt was exactly the texts asked about."""

    request_id: str | None
    time: str | None


class AuditAdmin:
    """Operations on the configured audit trail (SQLite or PostgreSQL)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    # -- reading ---------------------------------------------------------------------

    def verify(
        self,
        tenant: str | None = None,
        checkpoint_dir: Path | None = None,
        verifier_key: str | None = None,
        progress: VerifyProgress | None = None,
    ) -> AuditVerification:
        """Recompute every log (or ``tenant``'s) against its checkpoints and the anchor.

        ``checkpoint_dir`` overrides ``audit.checkpoint_export_dir``; ``verifier_key``
        overrides the key derived from the signing key file; ``progress`` is kept up to
        date as records are checked (from this thread: read it from another).
        """
        reader = self._reader()
        try:
            verifier = self._verifier(verifier_key)
            folder = checkpoint_dir or self._settings.audit.checkpoint_export_dir
            anchor: Anchor | None = None
            missing = None
            if folder is not None:
                try:
                    anchor = read_anchor(folder, verifier, self._settings.audit.log_name)
                except FileNotFoundError as exc:
                    # An anchor that vanished is not an empty one, unless nothing was
                    # signed yet.
                    if checkpoint_dir is not None or any(
                        reader.checkpoints(name) for name in reader.known_tenants()
                    ):
                        missing = str(exc)
            result = verify_all(reader, _suite(reader), verifier, anchor, tenant, progress)
        finally:
            reader.close()
        return AuditVerification(
            signatures_checked=verifier is not None,
            anchor_dir=folder,
            anchor_missing=missing,
            anchor_problems=result.anchor_problems,
            reports=result.reports,
            foreign_lists=result.foreign_lists,
        )

    def verifier_key(self) -> str:
        """The public key auditors check checkpoints and proofs with."""
        return self._required_signer().verifier_key()

    def generate_keys(self, out: Path) -> GeneratedKeys:
        """Write a new master key, checkpoint signing key and thought-signature seal key into
        ``out`` (owner-only files, never over existing ones), for a deployment to give to
        its replicas."""
        master_file, signing_file = out / "master.key", out / "signing.key"
        seal_file = out / "seal.key"
        for existing in (master_file, signing_file, seal_file):
            if existing.exists():
                raise FailedPrecondition(
                    f"{existing} exists; keys are never overwritten (its checkpoints and data "
                    "keys need it): choose another --out"
                )
        try:
            out.mkdir(parents=True, exist_ok=True, mode=0o700)
            master = load_or_create_master_key(None, master_file, create=True)
            signing = CheckpointSigner.generate(self._settings.audit.log_name)
            write_key_file(signing_file, signing)
            load_or_create_key(None, seal_file)
        except OSError as exc:
            raise FailedPrecondition(f"cannot write the keys into {out}: {exc.strerror}") from exc
        return GeneratedKeys(
            master_file, signing_file, master.key_id, signing.verifier_key(), seal_file
        )

    def records(self, request_id: str, *, decrypt: bool = False) -> list[AuditRecord]:
        """The records of one request (its request and answer); ``NotFound`` if none."""
        reader = self._reader()
        try:
            stored = reader.by_request(request_id)
            if not stored:
                raise NotFound(f"no audit record for request {request_id}")
            suite = _suite(reader)
            keyring = self._keyring(reader, suite) if decrypt else None
            return [_record(record, keyring, suite) for record in stored]
        finally:
            reader.close()

    def export(self, tenant: str | None = None, *, decrypt: bool = False) -> Iterator[AuditRecord]:
        """Every record (of ``tenant``, or of every tenant in turn), read as iterated.

        What stops it (no audit log, no master key to decrypt with) is raised here, before
        the first record; the connection closes when the iteration ends.
        """
        reader = self._reader()
        try:
            suite = _suite(reader)
            keyring = self._keyring(reader, suite) if decrypt else None
            tenants = [tenant] if tenant else reader.tenants()
        except BaseException:
            reader.close()
            raise
        return _exported(reader, tenants, keyring, suite)

    def prove(self, request_id: str, kind: RecordKind = "request") -> InclusionProof:
        """The proof bundle of one record, against the first checkpoint that covers it."""
        reader = self._reader()
        try:
            suite = _suite(reader)
            matches = [r for r in reader.by_request(request_id) if r.kind == kind]
            if not matches or matches[0].header is None:
                raise NotFound(f"no {kind} record for request {request_id}")
            record = matches[0]
            header = matches[0].header
            signed = [
                (size, note)
                for size, note in reader.checkpoints(record.tenant)
                if size > record.seq
            ]
            if not signed:
                raise FailedPrecondition(
                    "no signed checkpoint covers this record yet; run 'localgate audit checkpoint'"
                )
            # Unverified here: the bundle's reader checks the signature with the key they
            # hold. A row that is not even a checkpoint (written by hand) is passed over.
            heads = ((note, _parsed(note)) for _, note in signed)
            note, head = next(
                ((n, h) for n, h in heads if h is not None and h.size > record.seq), ("", None)
            )
            if head is None:
                raise FailedPrecondition(
                    "no checkpoint covering this record can be read; run 'localgate audit verify'"
                )
            leaves = reader.leaf_hashes(record.tenant, head.size)
            hasher = suite.tree_hasher()
            path = inclusion_proof(hasher, record.seq, leaves)
        finally:
            reader.close()
        stored = {"payload": record.payload, "prompt": record.original}
        return InclusionProof(
            suite.name,
            record.tenant,
            record.seq,
            header,
            note,
            path,
            origin=head.origin,
            tree_size=head.size,
            root=head.root,
            leaf_hash=hasher.hash_leaf(header),
            ciphertexts={name: data for name, data in stored.items() if data is not None},
        )

    def find_prompt(self, tenant: str, texts: Sequence[str]) -> list[PromptMatch]:
        """The requests of ``tenant`` that sent exactly ``texts`` (compared by HMAC; nothing
        is decrypted, but the master key is needed to open the tenant's HMAC key)."""
        reader = self._reader()
        try:
            suite = _suite(reader)
            keyring = Keyring(reader.db, self._master_key("comparing prompts"), suite)
            _, mac_key = keyring.current(tenant, "hmac", "-")
            wanted = suite.mac(mac_key, "\n".join(texts).encode()).hex()
            found = []
            for record in reader.records(tenant):
                header = parse_header(record.header) if record.header else {}
                if header.get("prompt_hmac") == wanted:
                    found.append(PromptMatch(header.get("request_id"), header.get("time")))
            return found
        finally:
            reader.close()

    # -- the auditor's report (admin/audit_report.py) -----------------------------------

    @property
    def log_name(self) -> str:
        """The name the signer gives this gateway's log."""
        return self._settings.audit.log_name

    def suite(self) -> str:
        """The cipher suite of the audit store (standard, or sm)."""
        reader = self._reader()
        try:
            return _suite(reader).name
        finally:
            reader.close()

    def verifier(self, key: str | None = None) -> CheckpointVerifier | None:
        """The verifier for ``key``, else from the signing key file; None if neither."""
        return self._verifier(key)

    def tenants(self) -> set[str]:
        """Every tenant the audit store knows (its records, heads, checkpoints)."""
        reader = self._reader()
        try:
            return reader.known_tenants()
        finally:
            reader.close()

    def data_keys(self, tenant: str) -> list[tuple[str, str, str, str | None]]:
        """(key id, purpose, period, destroyed at) of each data key of ``tenant``; never
        the keys themselves."""
        reader = self._reader()
        try:
            rows = reader.db.execute(
                "SELECT key_id, purpose, period, destroyed_at FROM audit_keys WHERE tenant=? "
                "ORDER BY period, purpose, key_id",
                (tenant,),
            ).fetchall()
        finally:
            reader.close()
        return [(str(k), str(p), str(d), None if t is None else str(t)) for k, p, d, t in rows]

    def purged_times(self, tenant: str) -> list[str]:
        """The ``recorded_at`` column of each record whose metadata was purged (the only
        time left of it; unverified, since the header it copied is gone)."""
        reader = self._reader()
        try:
            rows = reader.db.execute(
                "SELECT recorded_at FROM audit_log WHERE tenant=? AND header IS NULL ORDER BY seq",
                (tenant,),
            ).fetchall()
        finally:
            reader.close()
        return [str(row[0]) for row in rows]

    # -- maintaining -----------------------------------------------------------------

    def checkpoint(self) -> list[SignedHead]:
        """Sign the head of every log that grew since its last checkpoint (and export it)."""
        key = self._required_signer()
        reader = self._reader()
        try:
            # It writes (checkpoints, tenant lists), maybe before any upgraded gateway ran.
            upgrade_schema(reader.db.sqlalchemy_url)
            made = Checkpointer(
                reader,
                _suite(reader).tree_hasher(),
                key,
                self._settings.audit.log_name,
                self._settings.audit.checkpoint_export_dir,
            ).run()
        finally:
            reader.close()
        return [SignedHead(tenant, size) for tenant, size in made]

    def rotate_master_key(self, new_key_file: Path) -> KeyRotation:
        """Re-wrap every data key under the master key in ``new_key_file`` (created if
        missing); records are not rewritten. The gateway must then be pointed at it."""
        reader = self._reader()
        try:
            old = self._master_key("rotating")
            try:
                new = load_or_create_master_key(None, new_key_file, create=True)
            except (OSError, ValueError) as exc:
                raise InvalidArgument(f"the new master key {new_key_file}: {exc}") from exc
            rows = reader.db.execute(
                "SELECT key_id, wrapped FROM audit_keys WHERE wrapped IS NOT NULL"
            ).fetchall()
            reader.db.begin()
            try:
                for key_id, wrapped in rows:
                    reader.db.execute(
                        "UPDATE audit_keys SET wrapped=?, master_key_id=? WHERE key_id=?",
                        (new.wrap(old.unwrap(wrapped, key_id), key_id), new.key_id, key_id),
                    )
            except DecryptionError as exc:
                reader.db.rollback()
                raise FailedPrecondition(
                    f"the current master key does not open data key {key_id}; nothing was "
                    "re-wrapped"
                ) from exc
            reader.db.commit()
            # Replicas started with the old key from now on refuse to start, naming it.
            remember_master_key(reader.db, new)
        finally:
            reader.close()
        return KeyRotation(len(rows), new.key_id)

    def shred(self, now: datetime | None = None) -> list[str]:
        """Destroy the data keys whose retention has ended (by ``now``); their ids."""
        reader = self._reader()
        try:
            return shred_expired(reader, self._settings.audit, now or datetime.now(UTC))
        finally:
            reader.close()

    def purge(self, now: datetime | None = None) -> list[PurgeOutcome]:
        """Erase metadata past ``audit.metadata_retention_days`` behind signed purge markers;
        per tenant due, what was purged or why it was refused."""
        key = self._required_signer()
        reader = self._reader()
        try:
            store = AuditStore(
                database(self._settings), self._master_key("purging"), _suite(reader)
            )
            store.start()
            try:
                return purge_tenants(
                    store, reader, self._settings.audit, key, now or datetime.now(UTC)
                )
            finally:
                store.close()
        finally:
            reader.close()

    # -- resources -------------------------------------------------------------------

    def _reader(self) -> AuditReader:
        return open_reader(self._settings)

    def _verifier(self, key: str | None) -> CheckpointVerifier | None:
        if key:
            try:
                return CheckpointVerifier.from_key_string(key)
            except CheckpointError as exc:
                raise InvalidArgument(f"not a verifier key: {exc}") from exc
        own = signer(self._settings, create=False)
        return CheckpointVerifier.from_key_string(own.verifier_key()) if own else None

    def _required_signer(self) -> CheckpointSigner:
        """The signing key (checkpoints and purge markers are signed), or a clear error."""
        key = signer(self._settings, create=False)
        if key is None:
            raise FailedPrecondition(
                f"cannot read the signing key {self._settings.audit_signing_key_path}; run "
                "this where the key is (audit.signing_key_file)"
            )
        return key

    def _master_key(self, purpose: str) -> MasterKey:
        try:
            return master_key(self._settings, create=False)
        except (FileNotFoundError, PermissionError, ValueError) as exc:
            raise FailedPrecondition(f"{purpose} needs the audit master key: {exc}") from exc

    def _keyring(self, reader: AuditReader, suite: CipherSuite) -> Keyring:
        return Keyring(reader.db, self._master_key("decrypting"), suite)


def check_proof(proof_text: str, verifier_key: str) -> ProofCheck:
    """Check a proof bundle offline, with only the log's public key.

    Every field the bundle repeats for convenience (origin, tree size, root, leaf hash,
    leaf index) must agree with what it is checked against, and each ciphertext it
    carries must hash to its digest in the header: a bundle edited anywhere fails.
    Proof files written before bundles (without those fields) are still read.
    """
    try:
        data = json.loads(proof_text)
        if not isinstance(data, dict):
            raise ValueError("a proof bundle is a JSON object")
        if data.get("format", BUNDLE_FORMAT) != BUNDLE_FORMAT:
            raise ValueError(f"not a proof bundle of format {BUNDLE_FORMAT}")
        verifier = CheckpointVerifier.from_key_string(verifier_key)
        checkpoint = verifier.verify(data["checkpoint"])
        header = base64.b64decode(data["header"], validate=True)
        path = [base64.b64decode(node, validate=True) for node in data["proof"]]
        hasher = CipherSuite(data["suite"]).tree_hasher()
        seq = data["seq"]
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise ValueError("the bundle's seq is not a whole number")
        fields = parse_header(header)
        leaf = hasher.hash_leaf(header)
        problem = _bundle_disagrees(data, checkpoint, fields, leaf)
        if problem is not None:
            return ProofCheck(False, problem)
        included = verify_inclusion(hasher, seq, checkpoint.size, leaf, path, checkpoint.root)
        if not included or fields.get("seq") != seq or data.get("leaf_index", seq) != seq:
            return ProofCheck(False, "the record is not in the signed log")
        suite = CipherSuite(data["suite"])
        problem = _ciphertexts_differ(data.get("ciphertexts", {}), fields, suite)
    except (CheckpointError, KeyError, TypeError, ValueError) as exc:
        return ProofCheck(False, str(exc))
    if problem is not None:
        return ProofCheck(False, problem)
    return ProofCheck(
        True,
        kind=_text(fields.get("kind")),
        seq=seq,
        tenant=_text(fields.get("tenant")),
        request_id=_text(fields.get("request_id")),
        time=_text(fields.get("time")),
        origin=checkpoint.origin,
        size=checkpoint.size,
        signed_at=checkpoint.time,
    )


def _bundle_disagrees(
    data: dict[str, Any], checkpoint: Checkpoint, fields: dict[str, Any], leaf: bytes
) -> str | None:
    """What in the bundle contradicts its signed checkpoint or its header, if anything."""
    tenant = fields.get("tenant")
    if not checkpoint.origin.endswith(f"/audit/{tenant}"):
        return f"the checkpoint is of the log {checkpoint.origin!r}, not tenant {tenant!r}'s"
    if data.get("origin", checkpoint.origin) != checkpoint.origin:
        return f"the bundle names the log {data['origin']!r}, the checkpoint {checkpoint.origin!r}"
    if data.get("tenant", tenant) != tenant:
        return "the bundle's tenant is not the one in the record's header"
    if data.get("tree_size", checkpoint.size) != checkpoint.size:
        return "the bundle's tree size is not the signed checkpoint's"
    if "root" in data and base64.b64decode(data["root"], validate=True) != checkpoint.root:
        return "the bundle's root hash is not the signed checkpoint's"
    if "leaf_hash" in data and base64.b64decode(data["leaf_hash"], validate=True) != leaf:
        return "the bundle's leaf hash is not the hash of its header"
    return None


def _ciphertexts_differ(
    carried: dict[str, str], fields: dict[str, Any], suite: CipherSuite
) -> str | None:
    """Why a ciphertext in the bundle is not the one the record's header fixed, if so."""
    for name, encoded in carried.items():
        if name not in _CIPHERTEXTS:
            raise ValueError(f"a proof bundle carries no ciphertext named {name!r}")
        digest = fields.get(_CIPHERTEXTS[name])
        if suite.digest(base64.b64decode(encoded, validate=True)).hex() != digest:
            return f"the {name} ciphertext is not the one the record's header fixed"
    return None


def _parsed(note: str) -> Checkpoint | None:
    try:
        return Checkpoint.parse(note_text(note))
    except CheckpointError:
        return None


def _suite(reader: AuditReader) -> CipherSuite:
    row = reader.db.execute("SELECT value FROM audit_meta WHERE name='suite'").fetchone()
    return CipherSuite("sm" if row and row[0] == "sm" else "standard")


def _exported(
    reader: AuditReader, tenants: list[str], keyring: Keyring | None, suite: CipherSuite
) -> Iterator[AuditRecord]:
    try:
        for name in tenants:
            for record in reader.records(name):
                yield _record(record, keyring, suite)
    finally:
        reader.close()


def _record(record: StoredRecord, keyring: Keyring | None, suite: CipherSuite) -> AuditRecord:
    header = parse_header(record.header) if record.header else {}
    decrypted: dict[str, Any] = {}
    if keyring is not None:
        for column, purpose, name in (
            (record.payload, "payload", "payload"),
            (record.original, "prompt", "original_prompt"),
        ):
            if column is None:
                continue
            try:
                key = keyring.by_id(header[f"{purpose}_key"])
                plain = suite.decrypt(
                    key, column, associated_data(record.tenant, record.seq, purpose)
                )
                decrypted[name] = json.loads(plain)
            except DecryptionError as exc:
                decrypted[name] = {"unavailable": str(exc)}
    return AuditRecord(record.tenant, record.seq, header, decrypted)


def _text(value: object) -> str | None:
    return None if value is None else str(value)
