"""Signed checkpoints: the note format, its keys, and what a verifier refuses.

The PeterNeumann and EnochRoot keys and signatures are the published test vectors of
Go's ``golang.org/x/mod/sumdb/note`` (``note_test.go``), the reference implementation
of c2sp.org/signed-note: matching them shows other tools can read our notes and keys.
"""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from localgate.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointSigner,
    CheckpointVerifier,
    load_signer,
    note_signers,
    note_time,
    write_key_file,
)
from localgate.secret import Secret

PETER_SIGNING_KEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VERIFIER_KEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VERIFIER_KEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIGNATURE = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgY"
    "N1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIGNATURE = (
    "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aG"
    "rQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
)

ORIGIN = "localgate/gw-1/audit/acme"
ROOT = bytes.fromhex("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")
WHEN = datetime(2025, 6, 1, 12, 0, 5, tzinfo=UTC)
GOOD_ROOT_LINE = "XcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg="
GOOD_BODY = f"{ORIGIN}\n8\n{GOOD_ROOT_LINE}\ntime 2025-06-01T12:00:05Z\n"


@pytest.fixture(scope="module")
def signer() -> CheckpointSigner:
    return CheckpointSigner.generate("localgate/gw-1")


@pytest.fixture
def checkpoint() -> Checkpoint:
    return Checkpoint(origin=ORIGIN, size=8, root=ROOT, time=WHEN)


def replace_line(note: str, number: int, line: str) -> str:
    lines = note.split("\n")
    lines[number] = line
    return "\n".join(lines)


class TestCheckpointBody:
    def test_body_is_the_tlog_checkpoint_text_with_a_time_line(
        self, checkpoint: Checkpoint
    ) -> None:
        assert checkpoint.body() == (
            "localgate/gw-1/audit/acme\n"
            "8\n"
            "XcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n"
            "time 2025-06-01T12:00:05Z\n"
        )
        assert checkpoint.body() == GOOD_BODY

    def test_parse_round_trip(self, checkpoint: Checkpoint) -> None:
        assert Checkpoint.parse(checkpoint.body()) == checkpoint
        empty = Checkpoint(ORIGIN, 0, bytes(32), WHEN)
        assert Checkpoint.parse(empty.body()) == empty

    def test_time_is_kept_in_utc_whole_seconds(self) -> None:
        local = datetime(2025, 6, 1, 20, 0, 5, 987654, tzinfo=timezone(timedelta(hours=8)))
        checkpoint = Checkpoint(ORIGIN, 1, ROOT, local)
        assert checkpoint.time == WHEN
        assert checkpoint.time.tzinfo is UTC
        assert checkpoint.body().endswith("time 2025-06-01T12:00:05Z\n")

    @pytest.mark.parametrize(
        ("fields", "message"),
        [
            ({"origin": ""}, "origin"),
            ({"origin": "a\nb"}, "origin"),
            ({"origin": "a\tb"}, "origin"),
            ({"size": -1}, "tree size"),
            ({"size": 2**64}, "tree size"),
            ({"size": True}, "tree size"),
            ({"root": b""}, "root hash"),
            ({"time": datetime(2025, 6, 1)}, "timezone-aware"),
        ],
    )
    def test_invalid_checkpoints_are_refused(self, fields: dict[str, object], message: str) -> None:
        values: dict[str, object] = {"origin": ORIGIN, "size": 1, "root": ROOT, "time": WHEN}
        values.update(fields)
        with pytest.raises(CheckpointError, match=message):
            Checkpoint(**values)  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        "body",
        [
            "",
            "\n",
            GOOD_BODY[:-1],  # no final newline
            GOOD_BODY.rsplit("time", 1)[0],  # no time line
            GOOD_BODY + "extra\n",  # an extension line we cannot represent
            GOOD_BODY.replace("\ntime", "\n\ntime"),
        ],
    )
    def test_malformed_bodies_are_refused(self, body: str) -> None:
        with pytest.raises(CheckpointError, match="checkpoint"):
            Checkpoint.parse(body)

    @pytest.mark.parametrize(
        ("line", "replacement"),
        [
            (0, ""),
            (1, "08"),
            (1, "+8"),
            (1, "8 "),
            (1, "-1"),
            (1, "\u0668"),  # ARABIC-INDIC DIGIT EIGHT: int() would take it
            (1, "1_0"),  # int() would take this too
            (1, "18446744073709551616"),
            (1, ""),
            (2, ""),
            (2, GOOD_ROOT_LINE.rstrip("=")),  # unpadded
            (2, GOOD_ROOT_LINE[:-2] + "h="),  # non-canonical trailing bits
            (2, GOOD_ROOT_LINE.replace("+", "-")),  # URL-safe alphabet
            (2, " " + GOOD_ROOT_LINE),
            (3, "time 2025-06-01 12:00:05Z"),
            (3, "time 2025-06-01T12:00:05+00:00"),
            (3, "time 2025-06-01T12:00:05.5Z"),
            (3, "time 2025-06-01T12:00:05z"),
            (3, "time 2025-13-01T12:00:05Z"),
            (3, "time 2025-06-01T24:00:00Z"),
            (3, "time  2025-06-01T12:00:05Z"),
            (3, "when 2025-06-01T12:00:05Z"),
        ],
    )
    def test_malformed_lines_are_refused(self, line: int, replacement: str) -> None:
        with pytest.raises(CheckpointError, match="checkpoint"):
            Checkpoint.parse(replace_line(GOOD_BODY, line, replacement))


class TestSignedNoteInterop:
    def test_key_strings_match_go_sumdb_note(self) -> None:
        signer = CheckpointSigner.from_key_string(PETER_SIGNING_KEY)
        assert signer.name == "PeterNeumann"
        assert signer.key_id == 0xC74F20A3
        assert signer.verifier_key() == PETER_VERIFIER_KEY
        assert signer.key_string().reveal() == PETER_SIGNING_KEY
        verifier = CheckpointVerifier.from_key_string(PETER_VERIFIER_KEY)
        assert verifier.key_string() == PETER_VERIFIER_KEY
        assert verifier.key_id == 0xC74F20A3

    def test_signature_matches_go_sumdb_note(self) -> None:
        # Ed25519 is deterministic, so the whole note must be byte-for-byte Go's.
        signer = CheckpointSigner.from_key_string(Secret(PETER_SIGNING_KEY))
        assert signer.sign_note(GO_TEXT) == GO_TEXT + "\n" + PETER_SIGNATURE

    def test_go_note_with_two_signers_opens_with_either_key(self) -> None:
        note = GO_TEXT + "\n" + PETER_SIGNATURE + ENOCH_SIGNATURE
        assert CheckpointVerifier.from_key_string(PETER_VERIFIER_KEY).open_note(note) == GO_TEXT
        assert CheckpointVerifier.from_key_string(ENOCH_VERIFIER_KEY).open_note(note) == GO_TEXT

    def test_go_note_without_our_key_is_refused(self) -> None:
        note = GO_TEXT + "\n" + ENOCH_SIGNATURE
        verifier = CheckpointVerifier.from_key_string(PETER_VERIFIER_KEY)
        with pytest.raises(CheckpointError, match=r"not signed by PeterNeumann\+c74f20a3"):
            verifier.open_note(note)

    def test_go_note_with_a_corrupted_signature_is_refused(self) -> None:
        corrupted = PETER_SIGNATURE[:60] + "ABCD" + PETER_SIGNATURE[60:]
        verifier = CheckpointVerifier.from_key_string(PETER_VERIFIER_KEY)
        with pytest.raises(CheckpointError, match="does not verify"):
            verifier.open_note(GO_TEXT + "\n" + corrupted)

    @pytest.mark.parametrize(
        "key",
        [
            PETER_VERIFIER_KEY[:-1],
            PETER_VERIFIER_KEY + "A",
            "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "PeterNeuman+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "PeterNeumann+c74f20a+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "PeterNeumann+c74f20a3",
            "+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            # Go's own bad-key cases: the wrong key length, and an unknown algorithm.
            "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
            "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            PETER_SIGNING_KEY,
        ],
    )
    def test_malformed_verifier_keys_are_refused(self, key: str) -> None:
        with pytest.raises(CheckpointError):
            CheckpointVerifier.from_key_string(key)

    @pytest.mark.parametrize(
        "key",
        [
            PETER_VERIFIER_KEY,
            PETER_SIGNING_KEY[:-1],
            PETER_SIGNING_KEY.replace("c74f20a3", "c74f20a4"),
            PETER_SIGNING_KEY.replace("PeterNeumann", "PeterNeuman"),
            "PRIVATE+KEY+PeterNeumann+c74f20a3",
            "private+key+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz",
        ],
    )
    def test_malformed_signing_keys_are_refused_without_echoing_them(self, key: str) -> None:
        with pytest.raises(CheckpointError) as caught:
            CheckpointSigner.from_key_string(key)
        assert "AYEKFALV" not in str(caught.value)


class TestSignAndVerify:
    def test_round_trip(self, signer: CheckpointSigner, checkpoint: Checkpoint) -> None:
        note = signer.sign(checkpoint)
        assert note.startswith(checkpoint.body() + "\n\u2014 localgate/gw-1 ")
        assert note.endswith("\n")
        verifier = CheckpointVerifier.from_key_string(signer.verifier_key())
        assert verifier.verify(note) == checkpoint
        assert verifier.verify(note, origin=ORIGIN) == checkpoint
        assert signer.verifier().verify(note) == checkpoint

    def test_signature_line_carries_the_key_id(
        self, signer: CheckpointSigner, checkpoint: Checkpoint
    ) -> None:
        line = signer.sign(checkpoint).split("\n")[-2]
        raw = base64.b64decode(line.split(" ")[2])
        assert len(raw) == 4 + 64
        assert int.from_bytes(raw[:4], "big") == signer.key_id

    def test_origin_of_another_log_is_refused(
        self, signer: CheckpointSigner, checkpoint: Checkpoint
    ) -> None:
        with pytest.raises(CheckpointError, match="not 'localgate/gw-1/audit/other'"):
            signer.verifier().verify(signer.sign(checkpoint), origin="localgate/gw-1/audit/other")

    @pytest.mark.parametrize(
        ("line", "replacement"),
        [
            (0, "localgate/gw-1/audit/other"),
            (1, "9"),
            (1, "7"),
            (2, base64.b64encode(bytes(32)).decode()),
            (3, "time 2025-06-01T12:00:06Z"),
        ],
    )
    def test_tampered_checkpoints_fail(
        self, signer: CheckpointSigner, checkpoint: Checkpoint, line: int, replacement: str
    ) -> None:
        tampered = replace_line(signer.sign(checkpoint), line, replacement)
        with pytest.raises(CheckpointError, match="does not verify"):
            signer.verifier().verify(tampered)

    def test_wrong_key_fails(self, signer: CheckpointSigner, checkpoint: Checkpoint) -> None:
        other = CheckpointSigner.generate("localgate/gw-2")
        with pytest.raises(CheckpointError, match=r"not signed by localgate/gw-2\+"):
            other.verifier().verify(signer.sign(checkpoint))

    def test_same_name_but_another_key_fails(
        self, signer: CheckpointSigner, checkpoint: Checkpoint
    ) -> None:
        # A rotated key keeps the name; its key id tells the signatures apart.
        rotated = CheckpointSigner.generate(signer.name)
        with pytest.raises(CheckpointError, match="not signed by"):
            rotated.verifier().verify(signer.sign(checkpoint))

    def test_signature_line_moved_to_another_key_id_fails(
        self, signer: CheckpointSigner, checkpoint: Checkpoint
    ) -> None:
        # Our name and our signature, but the id of another key: that is another key.
        note = signer.sign(checkpoint)
        line = note.split("\n")[-2]
        raw = base64.b64decode(line.split(" ")[2])
        forged_id = ((signer.key_id + 1) % 2**32).to_bytes(4, "big")
        forged = f"\u2014 {signer.name} {base64.b64encode(forged_id + raw[4:]).decode()}"
        with pytest.raises(CheckpointError, match="not signed by"):
            signer.verifier().verify(note.replace(line, forged))

    def test_unknown_signatures_are_ignored(
        self, signer: CheckpointSigner, checkpoint: Checkpoint
    ) -> None:
        note = signer.sign(checkpoint)
        witness = CheckpointSigner.generate("witness.example/w1")
        witness_line = witness.sign(checkpoint).split("\n\n")[1]
        # Before and after ours, plus a line that does not even verify for its own key.
        cosigned = note + witness_line + ENOCH_SIGNATURE
        cosigned_first = checkpoint.body() + "\n" + witness_line + note.split("\n\n")[1]
        verifier = signer.verifier()
        assert verifier.verify(cosigned) == checkpoint
        assert verifier.verify(cosigned_first) == checkpoint
        assert witness.verifier().verify(cosigned) == checkpoint

    def test_a_bad_signature_of_ours_rejects_the_note(
        self, signer: CheckpointSigner, checkpoint: Checkpoint
    ) -> None:
        note = signer.sign(checkpoint)
        line = note.split("\n")[-2]
        raw = bytearray(base64.b64decode(line.split(" ")[2]))
        raw[10] ^= 1
        bad = f"\u2014 {signer.name} {base64.b64encode(bytes(raw)).decode()}\n"
        # Even with a good signature too: our key never makes bad ones, so someone did.
        with pytest.raises(CheckpointError, match="does not verify"):
            signer.verifier().verify(note + bad)

    def test_a_short_signature_of_ours_rejects_the_note(
        self, signer: CheckpointSigner, checkpoint: Checkpoint
    ) -> None:
        short = base64.b64encode(signer.key_id.to_bytes(4, "big") + b"x").decode()
        note = checkpoint.body() + f"\n\u2014 {signer.name} {short}\n"
        with pytest.raises(CheckpointError, match="does not verify"):
            signer.verifier().verify(note)

    def test_a_signed_note_that_is_no_checkpoint_is_refused(self, signer: CheckpointSigner) -> None:
        note = signer.sign_note("hello\n")
        assert signer.verifier().open_note(note) == "hello\n"
        with pytest.raises(CheckpointError, match="malformed checkpoint"):
            signer.verifier().verify(note)

    def test_sign_note_refuses_unsignable_text(self, signer: CheckpointSigner) -> None:
        for text in ("no newline", "bell\x07\n", "\ud800\n"):
            with pytest.raises(CheckpointError):
                signer.sign_note(text)


class TestMalformedNotes:
    @pytest.mark.parametrize(
        "damage",
        [
            lambda note: note.split("\n\n")[0] + "\n",  # no signatures
            lambda note: note.split("\n\n")[0] + "\n\n",  # blank line, nothing after it
            lambda note: note[:-1],  # no final newline
            lambda note: note.replace("\n\n", "\n"),  # no blank line
            lambda note: note.replace("\u2014 ", "-- "),  # not an em dash
            lambda note: note.replace("\u2014 ", "\u2014"),  # no space after the dash
            lambda note: note + "Unexpected line.\n",
            lambda note: note + "\n",
            lambda note: "\x01" + note,
            lambda note: note.replace("\n", "\r\n"),
            lambda note: note.replace("localgate/gw-1 ", "localgate/gw 1 "),
            lambda note: note.replace("localgate/gw-1 ", "localgate+gw-1 "),
            lambda note: note[:-3] + "*=\n",  # not base64
            lambda note: note[:-2] + "\n",  # base64 without its padding
            lambda note: note + note.split("\n\n")[1] * 100,  # too many signatures
        ],
    )
    def test_malformed_notes_are_refused(
        self, signer: CheckpointSigner, checkpoint: Checkpoint, damage: Callable[[str], str]
    ) -> None:
        note = signer.sign(checkpoint)
        with pytest.raises(CheckpointError):
            signer.verifier().verify(damage(note))

    def test_lone_surrogate_is_refused(self, signer: CheckpointSigner) -> None:
        note = signer.sign(Checkpoint(ORIGIN, 1, ROOT, WHEN)).replace("acme", "\udcff")
        with pytest.raises(CheckpointError, match="UTF-8"):
            signer.verifier().verify(note)

    def test_signature_limit_still_accepts_a_busy_note(
        self, signer: CheckpointSigner, checkpoint: Checkpoint
    ) -> None:
        # The spec requires accepting at least 16 signatures.
        witnesses = [CheckpointSigner.generate(f"witness.example/{i}") for i in range(20)]
        lines = "".join(w.sign(checkpoint).split("\n\n")[1] for w in witnesses)
        assert signer.verifier().verify(signer.sign(checkpoint) + lines) == checkpoint


class TestKeys:
    def test_generated_keys_round_trip(self, signer: CheckpointSigner) -> None:
        again = CheckpointSigner.from_key_string(signer.key_string())
        assert again.verifier_key() == signer.verifier_key()
        assert signer.verifier_key().startswith("localgate/gw-1+")

    def test_signing_key_never_prints(self, signer: CheckpointSigner) -> None:
        # The seed is everything after the name and key id: standard base64, which can hold
        # "+" itself (and end with one), so it is not read from the right.
        secret = signer.key_string().reveal().split("+", 4)[4]
        assert len(secret) == 44
        for shown in (repr(signer), str(signer), str(signer.key_string())):
            assert secret not in shown
        assert repr(signer) == f"CheckpointSigner('localgate/gw-1', key_id={signer.key_id:08x})"

    @pytest.mark.parametrize("name", ["", "a+b", "a b", "a\u3000b", "a\nb", "a\tb"])
    def test_invalid_key_names_are_refused(self, name: str) -> None:
        with pytest.raises(CheckpointError, match="key name"):
            CheckpointSigner.generate(name)


class TestKeyFile:
    def test_written_key_file_is_private_and_loads(
        self, tmp_path: Path, signer: CheckpointSigner
    ) -> None:
        path = tmp_path / "keys" / "checkpoint.key"
        write_key_file(path, signer)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.read_text().startswith("PRIVATE+KEY+localgate/gw-1+")
        loaded = load_signer(path)
        assert loaded.verifier_key() == signer.verifier_key()

    def test_mode_is_0600_even_with_a_permissive_umask(
        self, tmp_path: Path, signer: CheckpointSigner
    ) -> None:
        previous = os.umask(0)
        try:
            write_key_file(tmp_path / "checkpoint.key", signer)
        finally:
            os.umask(previous)
        assert stat.S_IMODE((tmp_path / "checkpoint.key").stat().st_mode) == 0o600

    def test_an_existing_key_is_never_overwritten(
        self, tmp_path: Path, signer: CheckpointSigner
    ) -> None:
        path = tmp_path / "checkpoint.key"
        write_key_file(path, signer)
        with pytest.raises(FileExistsError):
            write_key_file(path, CheckpointSigner.generate("localgate/gw-1"))
        assert load_signer(path).verifier_key() == signer.verifier_key()

    def test_a_symlink_is_not_followed(self, tmp_path: Path, signer: CheckpointSigner) -> None:
        target = tmp_path / "elsewhere"
        link = tmp_path / "checkpoint.key"
        link.symlink_to(target)
        with pytest.raises(FileExistsError):
            write_key_file(link, signer)
        assert not target.exists()

    def test_a_damaged_key_file_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "checkpoint.key"
        path.write_text("PRIVATE+KEY+damaged\n")
        with pytest.raises(CheckpointError, match="malformed signing key"):
            load_signer(path)

    def test_a_missing_key_file_raises_oserror(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError):
            load_signer(tmp_path / "missing.key")


class TestReadingANoteUnverified:
    def test_signers_of_a_note_with_two_signatures(self) -> None:
        note = GO_TEXT + "\n" + PETER_SIGNATURE + ENOCH_SIGNATURE
        assert note_signers(note) == ["PeterNeumann+c74f20a3", "EnochRoot+af0cfe78"]
        # Not a checkpoint: it states no time.
        assert note_time(note) is None

    def test_time_and_signer_of_a_signed_checkpoint(
        self, signer: CheckpointSigner, checkpoint: Checkpoint
    ) -> None:
        note = signer.sign(checkpoint)
        assert note_time(note) == checkpoint.time
        assert note_signers(note) == [f"{signer.name}+{signer.key_id:08x}"]

    def test_malformed_signature_lines_are_left_out(self) -> None:
        assert note_signers(GO_TEXT + "\n" + "not a signature\n") == []
        assert note_signers("no blank line\n") == []
