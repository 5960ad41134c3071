"""What an audit record says, and its canonical form (the bytes the Merkle leaf covers).

A record is a header (metadata: who, what, when, on which object, with what result)
plus optional ciphertexts. The header carries the digest of each ciphertext, and the
leaf of the tenant's Merkle log is the hash of the canonical header bytes: so the log
keeps verifying after payload keys are destroyed, and a changed ciphertext, header,
position or tenant shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

__all__ = [
    "ADMIN_LOG",
    "FORMAT_VERSION",
    "PURGE_HEADER",
    "Kind",
    "PendingRecord",
    "canonical",
    "parse_header",
]

FORMAT_VERSION = 1
# The pseudo-tenant whose log holds the admin-action trail (no tenant can be named so:
# tenant names start with a letter or digit).
ADMIN_LOG = "_admin"
# The first line of the signed note in a purge marker (a record of kind "purge").
PURGE_HEADER = "localgate audit purge"
# "admin": an action taken through the admin API or a payload read by the CLI, in the
# "_admin" log (adminapi/trail.py).
Kind = Literal["request", "answer", "purge", "admin"]


@dataclass(slots=True)
class PendingRecord:
    """A record handed to the writer, which adds seq, time, keys, ciphertexts and digests.

    ``payload`` (what left, or what came back) and ``original`` (the prompt before
    redaction, only when configured) are plaintext here and never leave the process
    unencrypted. ``prompt`` and ``user`` are only HMAC'd.
    """

    tenant: str
    kind: Kind
    request_id: str
    fields: dict[str, Any]
    payload: bytes | None = None
    original: bytes | None = None
    prompt: bytes | None = None
    user: str | None = None
    sent: bytes | None = field(default=None)


def canonical(header: dict[str, Any]) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(header, option=orjson.OPT_SORT_KEYS)


def parse_header(raw: bytes) -> dict[str, Any]:
    """A stored header; raises ``ValueError`` if it is not a JSON object."""
    header = orjson.loads(raw)
    if not isinstance(header, dict):
        raise ValueError("an audit header must be a JSON object")
    return header
