"""AuditAdmin on a real audit store (SQLite, and PostgreSQL where it matters)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from localgate.admin.audit import BUNDLE_FORMAT, AuditAdmin, SignedHead, check_proof
from localgate.audit.checkpoint import CheckpointVerifier
from localgate.audit.crypto import CipherSuite
from localgate.audit.records import PendingRecord
from localgate.audit.store import AuditReader, AuditStore
from localgate.audit.trail import database, master_key, signer
from localgate.config import Settings, load_settings
from localgate.errors import FailedPrecondition, InvalidArgument, NotFound
from tests.audit.conftest import postgres_schema

LATER = datetime(2031, 6, 1, tzinfo=UTC)  # past every retention period of today's records


@dataclass
class Trail:
    """A configured audit trail with its keys, and a way to write records into it."""

    settings: Settings
    anchor: Path
    tmp_path: Path

    def append(self, tenant: str, requests: int, prompt: bytes | None = None) -> None:
        """``requests`` requests of ``tenant`` (ids ``<tenant>-<n>``), each with its answer."""
        store = AuditStore(
            database(self.settings),
            master_key(self.settings, create=True),
            CipherSuite("standard"),
        )
        store.start()
        for number in range(requests):
            request_id = f"{tenant}-{number}"
            for kind in ("request", "answer"):
                store.submit(
                    PendingRecord(
                        tenant,
                        kind,
                        request_id,
                        {"route": "generateContent"},
                        payload=json.dumps({"n": number, "kind": kind}).encode(),
                        prompt=prompt if kind == "request" else None,
                    )
                ).result(timeout=30)
        store.close()

    def with_config(self, text: str) -> Settings:
        """These settings with more configuration."""
        config = self.tmp_path / "other.yaml"
        config.write_text(f"data_dir: {self.settings.data_dir}\n{text}")
        return load_settings(config, {})[0]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def trail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Trail]:
    """On SQLite: the signing key created, no record yet."""
    with _trail(tmp_path, monkeypatch, "sqlite") as built:
        yield built


@contextlib.contextmanager
def _trail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str) -> Iterator[Trail]:
    for name in ("LOCALGATE_AUDIT_MASTER_KEY", "LOCALGATE_AUDIT_POSTGRES_DSN"):
        monkeypatch.delenv(name, raising=False)
    anchor = tmp_path / "worm"
    with contextlib.ExitStack() as stack:
        store = ""
        if backend == "postgres":
            dsn = stack.enter_context(postgres_schema())
            store = f"  store: postgres\n  postgres_dsn: '{dsn}'\n"
        config = tmp_path / "localgate.yaml"
        config.write_text(
            f"data_dir: {tmp_path / 'data'}\naudit:\n{store}  checkpoint_export_dir: {anchor}\n"
        )
        settings = load_settings(config, {})[0]
        assert signer(settings, create=True) is not None
        yield Trail(settings, anchor, tmp_path)


def test_sign_verify_prove_and_check_the_proof_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    with _trail(tmp_path, monkeypatch, backend) as trail:
        trail.append("acme", 3)
        trail.append("globex", 1)
        admin = AuditAdmin(trail.settings)

        signed = admin.checkpoint()
        again = admin.checkpoint()
        verified = admin.verify()
        proof = admin.prove("acme-1")
        answer = admin.prove("acme-1", "answer")
        key = admin.verifier_key()

    assert sorted(signed, key=lambda head: head.tenant) == [
        SignedHead("acme", 6),
        SignedHead("globex", 2),
    ]
    assert again == []
    assert verified.ok
    assert verified.signatures_checked
    assert verified.anchor_dir == trail.anchor
    assert [(r.tenant, r.records, r.checkpoints) for r in verified.reports] == [
        ("acme", 6, 1),
        ("globex", 2, 1),
    ]
    assert (proof.tenant, proof.seq, answer.seq) == ("acme", 2, 3)
    checked = check_proof(json.dumps(proof.as_json()), key)
    assert checked.valid, checked.problem
    assert (checked.kind, checked.seq, checked.tenant, checked.request_id) == (
        "request",
        2,
        "acme",
        "acme-1",
    )
    assert (checked.size, checked.origin) == (6, "localgate/audit/acme")


def test_a_proof_that_does_not_hold_is_invalid(trail: Trail) -> None:
    trail.append("acme", 2)
    admin = AuditAdmin(trail.settings)
    admin.checkpoint()
    proof = admin.prove("acme-0").as_json()
    key = admin.verifier_key()

    moved = check_proof(json.dumps({**proof, "seq": 1}), key)
    garbage = check_proof("not json", key)
    missing = check_proof(json.dumps({"suite": "standard"}), key)
    wrong_key = check_proof(json.dumps(proof), key.replace(key[-8:], "AAAAAAAA"))

    assert (moved.valid, moved.problem) == (False, "the record is not in the signed log")
    assert not garbage.valid
    assert not missing.valid
    assert not wrong_key.valid


def test_a_proof_bundle_carries_what_an_outsider_checks(trail: Trail) -> None:
    trail.append("acme", 3, prompt=b"the prompt")
    admin = AuditAdmin(trail.settings)
    admin.checkpoint()
    bundle = admin.prove("acme-1").as_json()
    checkpoint = CheckpointVerifier.from_key_string(admin.verifier_key()).verify(
        bundle["checkpoint"]
    )
    header = json.loads(base64.b64decode(bundle["header"]))
    hasher = CipherSuite("standard").tree_hasher()

    assert bundle["format"] == BUNDLE_FORMAT
    assert (bundle["origin"], bundle["tree_size"]) == (checkpoint.origin, checkpoint.size)
    assert (bundle["leaf_index"], bundle["seq"], header["seq"]) == (2, 2, 2)
    assert base64.b64decode(bundle["root"]) == checkpoint.root
    assert base64.b64decode(bundle["leaf_hash"]) == hasher.hash_leaf(
        base64.b64decode(bundle["header"])
    )
    # The ciphertexts as stored, which the header's digests fix; never the plaintext.
    assert set(bundle["ciphertexts"]) == {"payload"}
    payload = base64.b64decode(bundle["ciphertexts"]["payload"])
    assert hashlib.sha256(payload).hexdigest() == header["payload_digest"]
    assert b'"n": 1' not in payload
    assert b'"kind"' not in payload
    assert "the prompt" not in json.dumps(bundle)


def _flip(text: str) -> str:
    """Base64 text with its first byte changed."""
    raw = bytearray(base64.b64decode(text))
    raw[0] ^= 1
    return base64.b64encode(bytes(raw)).decode()


def _without(bundle: dict[str, Any], name: str) -> dict[str, Any]:
    return {key: value for key, value in bundle.items() if key != name}


def _renamed(header: str) -> str:
    """A header naming another request."""
    return base64.b64encode(base64.b64decode(header).replace(b'"acme-1"', b'"acme-9"')).decode()


def _grown(note: str, size: int) -> str:
    """A signed note claiming one more record."""
    return note.replace(f"\n{size}\n", f"\n{size + 1}\n", 1)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda b: {**b, "origin": "evil/audit/acme"}, "the bundle names the log"),
        (lambda b: {**b, "tree_size": b["tree_size"] + 1}, "tree size"),
        (lambda b: {**b, "root": _flip(b["root"])}, "root hash"),
        (lambda b: {**b, "leaf_hash": _flip(b["leaf_hash"])}, "leaf hash"),
        (lambda b: {**b, "leaf_index": 0}, "not in the signed log"),
        (lambda b: {**b, "proof": [_flip(b["proof"][0]), *b["proof"][1:]]}, "not in the signed"),
        (lambda b: {**_without(b, "leaf_hash"), "header": _renamed(b["header"])}, "not in the"),
        (
            lambda b: {**b, "ciphertexts": {"payload": _flip(b["ciphertexts"]["payload"])}},
            "payload ciphertext",
        ),
        (lambda b: {**b, "ciphertexts": {"secret": "AA=="}}, "no ciphertext named"),
        (lambda b: {**b, "checkpoint": _grown(b["checkpoint"], b["tree_size"])}, "does not verify"),
        (lambda b: {**b, "format": "something/2"}, "format"),
    ],
)
def test_a_bundle_changed_anywhere_is_invalid(
    trail: Trail, change: Callable[[dict[str, Any]], dict[str, Any]], problem: str
) -> None:
    trail.append("acme", 2)
    admin = AuditAdmin(trail.settings)
    admin.checkpoint()
    bundle = admin.prove("acme-1").as_json()
    key = admin.verifier_key()

    checked = check_proof(json.dumps(change(bundle)), key)

    assert check_proof(json.dumps(bundle), key).valid
    assert not checked.valid
    assert problem in (checked.problem or "")


def test_a_checkpoint_row_that_is_no_checkpoint_is_passed_over(trail: Trail) -> None:
    trail.append("acme", 2)
    reader = AuditReader(database(trail.settings)())
    try:
        assert reader.add_checkpoint("acme", 1, "written by hand\n")
    finally:
        reader.close()
    admin = AuditAdmin(trail.settings)
    with pytest.raises(FailedPrecondition, match="can be read"):
        admin.prove("acme-0")
    admin.checkpoint()

    bundle = admin.prove("acme-0").as_json()

    assert bundle["tree_size"] == 4
    assert check_proof(json.dumps(bundle), admin.verifier_key()).valid


def test_a_proof_file_from_before_bundles_still_checks(trail: Trail) -> None:
    trail.append("acme", 2)
    admin = AuditAdmin(trail.settings)
    admin.checkpoint()
    bundle = admin.prove("acme-0").as_json()
    fields = ("suite", "tenant", "seq", "header", "checkpoint", "proof")
    old = {name: bundle[name] for name in fields}

    assert check_proof(json.dumps(old), admin.verifier_key()).valid


def test_records_and_export_with_and_without_decrypting(trail: Trail) -> None:
    trail.append("acme", 2)
    trail.append("globex", 1)
    admin = AuditAdmin(trail.settings)

    plain = admin.records("acme-1")
    opened = admin.records("acme-1", decrypt=True)
    exported = [(r.tenant, r.seq) for r in admin.export()]
    of_globex = [r.as_json() for r in admin.export("globex", decrypt=True)]

    assert [(r.seq, r.header["kind"], r.decrypted) for r in plain] == [
        (2, "request", {}),
        (3, "answer", {}),
    ]
    assert set(plain[0].as_json()) == {"tenant", "seq", "header"}
    assert opened[0].decrypted == {"payload": {"n": 1, "kind": "request"}}
    assert exported == [
        ("acme", 0),
        ("acme", 1),
        ("acme", 2),
        ("acme", 3),
        ("globex", 0),
        ("globex", 1),
    ]
    assert of_globex[1]["payload"] == {"n": 0, "kind": "answer"}
    assert list(of_globex[1]) == ["tenant", "seq", "header", "payload"]


def test_find_prompt_compares_without_decrypting(trail: Trail) -> None:
    trail.append("acme", 2, prompt=b"first text\nsecond text")
    trail.append("acme", 1, prompt=b"something else")
    admin = AuditAdmin(trail.settings)

    found = admin.find_prompt("acme", ["first text", "second text"])
    none = admin.find_prompt("acme", ["first text"])

    assert [match.request_id for match in found] == ["acme-0", "acme-1"]
    assert all(match.time for match in found)
    assert none == []


def test_what_stops_an_operation_is_said_clearly(trail: Trail) -> None:
    admin = AuditAdmin(trail.settings)
    with pytest.raises(
        NotFound, match=re.escape(f"no audit log at {trail.settings.audit_db_path}")
    ):
        admin.verify()
    trail.append("acme", 1)

    with pytest.raises(NotFound, match="no audit record for request nope"):
        admin.records("nope")
    with pytest.raises(NotFound, match="no answer record for request nope"):
        admin.prove("nope", "answer")
    with pytest.raises(FailedPrecondition, match="no signed checkpoint covers this record yet"):
        admin.prove("acme-0")
    with pytest.raises(InvalidArgument, match="not a verifier key"):
        admin.verify(verifier_key="nonsense")
    elsewhere = AuditAdmin(trail.with_config("audit:\n  signing_key_file: /nonexistent/key\n"))
    with pytest.raises(
        FailedPrecondition, match=re.escape("cannot read the signing key /nonexistent/key")
    ):
        elsewhere.checkpoint()
    with pytest.raises(FailedPrecondition, match="cannot read the signing key"):
        elsewhere.purge()
    trail.settings.audit_master_key_path.unlink()
    with pytest.raises(FailedPrecondition, match="decrypting needs the audit master key"):
        admin.records("acme-0", decrypt=True)
    with pytest.raises(FailedPrecondition, match="decrypting needs the audit master key"):
        admin.export(decrypt=True)
    with pytest.raises(FailedPrecondition, match="comparing prompts needs the audit master key"):
        admin.find_prompt("acme", ["x"])


def test_a_vanished_anchor_fails_verification(trail: Trail) -> None:
    trail.append("acme", 1)
    admin = AuditAdmin(trail.settings)
    admin.checkpoint()
    shutil.rmtree(trail.anchor)

    result = admin.verify()

    assert not result.ok
    assert result.anchor_missing == f"the checkpoint folder {trail.anchor} does not exist"
    assert all(report.ok for report in result.reports)


def test_rotating_the_master_key_keeps_every_record_readable(trail: Trail) -> None:
    trail.append("acme", 2)
    new_key = trail.tmp_path / "new-master.key"

    rotation = AuditAdmin(trail.settings).rotate_master_key(new_key)
    trail.settings.audit_master_key_path.unlink()
    rotated = AuditAdmin(trail.with_config(f"audit:\n  master_key_file: {new_key}\n"))

    assert rotation.rewrapped >= 1
    assert new_key.exists()
    assert rotated.records("acme-1", decrypt=True)[1].decrypted == {
        "payload": {"n": 1, "kind": "answer"}
    }


def test_shred_then_purge_past_retention(trail: Trail) -> None:
    trail.append("acme", 2)
    admin = AuditAdmin(trail.settings)
    admin.checkpoint()

    nothing_yet = admin.shred()
    destroyed = admin.shred(LATER)
    unreadable = admin.records("acme-0", decrypt=True)[0].decrypted["payload"]
    purged = admin.purge(LATER)
    after = admin.verify()

    assert nothing_yet == []
    assert destroyed
    assert set(unreadable) == {"unavailable"}
    assert [(outcome.tenant, outcome.below, outcome.refused) for outcome in purged] == [
        ("acme", 4, None)
    ]
    assert after.ok
    assert admin.records("acme-0")[0].header == {}
