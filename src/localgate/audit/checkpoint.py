"""Signed checkpoints of a tenant's audit log: C2SP tlog-checkpoint in a C2SP signed note.

A checkpoint commits to the log's Merkle tree head. The note text (the body) is::

    localgate/gw-1/audit/acme          origin: which log
    1042                               tree size
    2f3y...Xk=                         base64 of the RFC 6962 root hash
    time 2025-06-01T12:00:00Z          our one extension line, so the time is signed

and the signed note appends a blank line and one line per signature::

    — <key name> base64(4-byte key id || 64-byte Ed25519 signature)

with the key id of c2sp.org/signed-note: the first four bytes of
``SHA-256(key name || 0x0A || 0x01 || public key)``. Keys are written in the text
forms of Go's ``golang.org/x/mod/sumdb/note``, so other tools can check our notes::

    verifier key   <name>+<hex key id>+base64(0x01 || 32-byte public key)
    signing key    PRIVATE+KEY+<name>+<hex key id>+base64(0x01 || 32-byte seed)

Verifiers ignore signatures from keys they do not know (witnesses' cosignatures,
a rotated key), reject a note whose signature by their key is wrong, and reject a note
that their key did not sign.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from localgate.secret import Secret

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "CheckpointSigner",
    "CheckpointVerifier",
    "load_signer",
    "note_signers",
    "note_text",
    "note_time",
    "write_key_file",
]

_ED25519 = 0x01  # the signature type byte of c2sp.org/signed-note
_SIGNATURE_PREFIX = "\u2014 "  # em dash, space
_PRIVATE_PREFIX = "PRIVATE+KEY+"
# The spec asks verifiers to accept at least 16; Go's note package allows 100.
_MAX_SIGNATURES = 100
_MAX_TREE_SIZE = 2**64 - 1

_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")  # every ASCII control except newline
_TREE_SIZE = re.compile(r"0|[1-9][0-9]*")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_KEY_ID = re.compile(r"[0-9a-fA-F]{8}")
_TIME_LINE = re.compile(r"time ([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z")


class CheckpointError(ValueError):
    """A checkpoint, signed note or key is malformed, or a signature does not verify."""


@dataclass(frozen=True)
class Checkpoint:
    """The head of one log at one time: what a signed checkpoint says.

    ``time`` must be timezone-aware; it is kept in UTC and whole seconds, the
    precision of the signed text, so a parsed checkpoint equals the one signed.
    """

    origin: str
    size: int
    root: bytes
    time: datetime

    def __post_init__(self) -> None:
        if not self.origin or "\n" in self.origin or _CONTROL.search(self.origin):
            raise CheckpointError("a checkpoint origin must be one non-empty line of text")
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise CheckpointError("a checkpoint tree size must be an integer")
        if not 0 <= self.size <= _MAX_TREE_SIZE:
            raise CheckpointError(f"a checkpoint tree size must be 0 to 2**64-1, got {self.size}")
        if not isinstance(self.root, bytes) or not self.root:
            raise CheckpointError("a checkpoint root hash must be non-empty bytes")
        if not isinstance(self.time, datetime) or self.time.utcoffset() is None:
            raise CheckpointError("a checkpoint time must be a timezone-aware datetime")
        object.__setattr__(self, "time", self.time.astimezone(UTC).replace(microsecond=0))

    def body(self) -> str:
        """The note text that is signed: origin, size, root hash and time lines."""
        root = base64.b64encode(self.root).decode("ascii")
        return f"{self.origin}\n{self.size}\n{root}\ntime {_rfc3339(self.time)}\n"

    @classmethod
    def parse(cls, body: str) -> Checkpoint:
        """The checkpoint in ``body`` (the note text); does NOT check any signature.

        Strict: exactly the four lines ``body`` writes, canonical numbers and base64,
        so that ``parse(text).body() == text`` for every text it accepts.
        """
        if not body.endswith("\n"):
            raise CheckpointError("malformed checkpoint: the text must end with a newline")
        lines = body[:-1].split("\n")
        if len(lines) != 4:
            raise CheckpointError(
                "malformed checkpoint: expected 4 lines (origin, tree size, root hash, time),"
                f" got {len(lines)}"
            )
        origin, size_line, root_line, time_line = lines
        if not _TREE_SIZE.fullmatch(size_line):
            raise CheckpointError("malformed checkpoint: line 2 is not a tree size")
        root = _decode_base64(root_line, "malformed checkpoint: line 3 is not a base64 root hash")
        match = _TIME_LINE.fullmatch(time_line)
        if match is None:
            raise CheckpointError("malformed checkpoint: line 4 is not 'time YYYY-MM-DDTHH:MM:SSZ'")
        year, month, day, hour, minute, second = (int(part) for part in match.groups())
        try:
            time = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
        except ValueError as exc:
            raise CheckpointError("malformed checkpoint: line 4 is not a valid time") from exc
        return cls(origin=origin, size=int(size_line), root=root, time=time)


class CheckpointSigner:
    """An Ed25519 signing key with its signed-note key name; signs checkpoints."""

    __slots__ = ("_key", "_public", "key_id", "name")

    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        _check_name(name)
        self.name = name
        self._key = private_key
        self._public = private_key.public_key().public_bytes_raw()
        self.key_id = _key_id(name, self._public)

    def __repr__(self) -> str:
        return f"CheckpointSigner({self.name!r}, key_id={self.key_id:08x})"

    @classmethod
    def generate(cls, name: str) -> CheckpointSigner:
        """A new random key named ``name`` (e.g. ``localgate/<gateway name>``)."""
        return cls(name, Ed25519PrivateKey.generate())

    @classmethod
    def from_key_string(cls, key: str | Secret) -> CheckpointSigner:
        """The signer in a ``PRIVATE+KEY+<name>+<key id>+<seed>`` string."""
        text = key.reveal() if isinstance(key, Secret) else key
        # Messages here never quote the string: it is a private key.
        if not text.startswith(_PRIVATE_PREFIX):
            raise CheckpointError("not a signing key: it must start with PRIVATE+KEY+")
        name, key_id, seed = _split_key(text[len(_PRIVATE_PREFIX) :], "signing key")
        signer = cls(name, Ed25519PrivateKey.from_private_bytes(seed))
        if signer.key_id != key_id:
            raise CheckpointError(f"the signing key {name!r} does not match its key id")
        return signer

    def key_string(self) -> Secret:
        """The ``PRIVATE+KEY+…`` string for the key file, wrapped so that it cannot print."""
        seed = base64.b64encode(bytes((_ED25519,)) + self._key.private_bytes_raw()).decode()
        return Secret(f"{_PRIVATE_PREFIX}{self.name}+{self.key_id:08x}+{seed}")

    def verifier_key(self) -> str:
        """The public ``<name>+<key id>+<key>`` string to give to whoever checks checkpoints."""
        return _verifier_key(self.name, self.key_id, self._public)

    def verifier(self) -> CheckpointVerifier:
        """The verifier of this key's signatures."""
        return CheckpointVerifier(self.name, Ed25519PublicKey.from_public_bytes(self._public))

    def sign_note(self, text: str) -> str:
        """``text`` as a signed note with this key's signature line (c2sp.org/signed-note)."""
        if not text.endswith("\n") or _CONTROL.search(text):
            raise CheckpointError(
                "a note text must end with a newline and contain no control characters"
            )
        signature = self._key.sign(_utf8(text))
        encoded = base64.b64encode(self.key_id.to_bytes(4, "big") + signature).decode("ascii")
        return f"{text}\n{_SIGNATURE_PREFIX}{self.name} {encoded}\n"

    def sign(self, checkpoint: Checkpoint) -> str:
        """The whole signed checkpoint note."""
        return self.sign_note(checkpoint.body())


class CheckpointVerifier:
    """An Ed25519 public key with its key name; accepts only notes that it signed."""

    __slots__ = ("_key", "_public", "key_id", "name")

    def __init__(self, name: str, public_key: Ed25519PublicKey) -> None:
        _check_name(name)
        self.name = name
        self._key = public_key
        self._public = public_key.public_bytes_raw()
        self.key_id = _key_id(name, self._public)

    def __repr__(self) -> str:
        return f"CheckpointVerifier({self.key_string()!r})"

    @classmethod
    def from_key_string(cls, key: str) -> CheckpointVerifier:
        """The verifier in a ``<name>+<key id>+<key>`` string."""
        name, key_id, public = _split_key(key.strip(), "verifier key")
        verifier = cls(name, Ed25519PublicKey.from_public_bytes(public))
        if verifier.key_id != key_id:
            raise CheckpointError(f"the verifier key {name!r} does not match its key id")
        return verifier

    def key_string(self) -> str:
        """This key as a ``<name>+<key id>+<key>`` string."""
        return _verifier_key(self.name, self.key_id, self._public)

    def open_note(self, note: str) -> str:
        """The text of ``note`` once this key's signature on it verifies.

        Signature lines of other keys are ignored, as the signed-note spec requires,
        even when they share our name or our key id (but not both).
        """
        if _CONTROL.search(note):
            raise CheckpointError("malformed note: it contains a control character")
        blank = note.rfind("\n\n")
        if blank < 0:
            raise CheckpointError("malformed note: no blank line before the signatures")
        text, block = note[: blank + 1], note[blank + 2 :]
        if not block.endswith("\n"):
            raise CheckpointError("malformed note: no signature lines, or no final newline")
        lines = block[:-1].split("\n")
        if len(lines) > _MAX_SIGNATURES:
            raise CheckpointError(f"malformed note: more than {_MAX_SIGNATURES} signatures")
        message = _utf8(text)
        verified = False
        others = []
        for line in lines:
            name, key_id, signature = _parse_signature_line(line)
            if name != self.name or key_id != self.key_id:
                others.append(f"{name}+{key_id:08x}")
                continue
            try:
                self._key.verify(signature, message)
            except InvalidSignature as exc:
                # The spec lets a client reject the whole note: a bad signature by a key
                # we trust means someone altered the text or forged the line.
                raise CheckpointError(
                    f"the signature of {self.name}+{self.key_id:08x} does not verify:"
                    " the note was altered or not signed by this key"
                ) from exc
            verified = True
        if not verified:
            raise CheckpointError(
                f"the note is not signed by {self.name}+{self.key_id:08x}"
                f" (signed by: {', '.join(others)})"
            )
        return text

    def verify(self, note: str, *, origin: str | None = None) -> Checkpoint:
        """The checkpoint in ``note``, once its signature verifies (and its origin matches)."""
        checkpoint = Checkpoint.parse(self.open_note(note))
        if origin is not None and checkpoint.origin != origin:
            raise CheckpointError(f"the checkpoint is for {checkpoint.origin!r}, not {origin!r}")
        return checkpoint


def note_text(note: str) -> str:
    """The signed text of ``note`` (everything before its signature lines), unverified."""
    return note.split("\n\n", 1)[0] + "\n"


def note_time(note: str) -> datetime | None:
    """The time ``note``'s checkpoint states, unverified; None if it is not a checkpoint."""
    try:
        return Checkpoint.parse(note_text(note)).time
    except CheckpointError:
        return None


def note_signers(note: str) -> list[str]:
    """The ``<name>+<key id>`` of each signature line of ``note``, unverified (to show who
    signed it; ``verify`` is what trusts it). Malformed lines are left out."""
    blank = note.rfind("\n\n")
    signers = []
    for line in note[blank + 2 :].splitlines() if blank >= 0 else []:
        try:
            name, key_id, _ = _parse_signature_line(line)
        except CheckpointError:
            continue
        signers.append(f"{name}+{key_id:08x}")
    return signers


def write_key_file(path: str | os.PathLike[str], signer: CheckpointSigner) -> None:
    """Save ``signer`` to a new file readable by its owner only (mode 0600).

    Never overwrites: replacing a signing key loses the key that past checkpoints need.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # O_EXCL refuses an existing file or symlink; the mode is set at creation so the
    # key is never readable by others, even for an instant.
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)  # a umask only narrows it; be explicit anyway
            handle.write(signer.key_string().reveal() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError:
        target.unlink(missing_ok=True)
        raise


def load_signer(path: str | os.PathLike[str]) -> CheckpointSigner:
    """The signer saved by ``write_key_file``; ``OSError`` if unreadable."""
    return CheckpointSigner.from_key_string(Path(path).read_text(encoding="utf-8").strip())


def _rfc3339(moment: datetime) -> str:
    # strftime's %Y does not zero-pad years before 1000 on every platform.
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}Z"
    )


def _key_id(name: str, public_key: bytes) -> int:
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes((_ED25519,)) + public_key)
    return int.from_bytes(digest.digest()[:4], "big")


def _verifier_key(name: str, key_id: int, public_key: bytes) -> str:
    encoded = base64.b64encode(bytes((_ED25519,)) + public_key).decode("ascii")
    return f"{name}+{key_id:08x}+{encoded}"


def _check_name(name: str) -> None:
    if not name or "+" in name or any(c.isspace() or c < " " for c in name):
        raise CheckpointError(
            f"key name {name!r} must be non-empty, without spaces or '+' (c2sp.org/signed-note)"
        )


def _split_key(text: str, kind: str) -> tuple[str, int, bytes]:
    """(name, key id, 32 key bytes) of ``<name>+<hex key id>+base64(0x01 || key)``."""
    # Only two splits: standard base64 uses '+' too, and names and ids never contain it.
    parts = text.split("+", 2)
    if len(parts) != 3 or not _KEY_ID.fullmatch(parts[1]):
        raise CheckpointError(f"malformed {kind}: expected <name>+<8 hex digits>+<base64 key>")
    name, key_id, encoded = parts
    _check_name(name)
    raw = _decode_base64(encoded, f"malformed {kind}: the key is not base64")
    if len(raw) != 33 or raw[0] != _ED25519:
        raise CheckpointError(f"unsupported {kind}: only Ed25519 (type 0x01) keys are accepted")
    return name, int(key_id, 16), raw[1:]


def _parse_signature_line(line: str) -> tuple[str, int, bytes]:
    """(key name, key id, signature) of ``— <name> base64(key id || signature)``."""
    if not line.startswith(_SIGNATURE_PREFIX):
        raise CheckpointError("malformed note: a signature line must start with an em dash")
    name, _, encoded = line[len(_SIGNATURE_PREFIX) :].partition(" ")
    try:
        _check_name(name)
    except CheckpointError as exc:
        raise CheckpointError("malformed note: a signature line has an invalid key name") from exc
    raw = _decode_base64(encoded, "malformed note: a signature is not base64")
    if len(raw) < 5:
        raise CheckpointError("malformed note: a signature is too short")
    return name, int.from_bytes(raw[:4], "big"), raw[4:]


def _decode_base64(text: str, message: str) -> bytes:
    """Strict standard base64: the canonical encoding only, so no two texts mean one value."""
    if not _BASE64.fullmatch(text):
        raise CheckpointError(message)
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise CheckpointError(message) from exc
    if base64.b64encode(raw).decode("ascii") != text:
        raise CheckpointError(message)
    return raw


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates: not representable in a note
        raise CheckpointError("a note must be valid UTF-8") from exc
