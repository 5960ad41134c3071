"""Thought signatures: forwarded upstream only if the upstream issued them.

``thoughtSignature`` is opaque base64 that Gemini returns on parts and expects back,
unchanged, in later turns. The gateway cannot read it, so a client could smuggle
anything upstream in it. Instead of passing it through on trust, the gateway *seals*
every signature the upstream sends — the client receives the upstream's signature with
a MAC bound to its tenant — and on the way back *opens* it: a sealed signature with a
valid MAC is replaced by the upstream's original; anything else is refused (or, if the
policy says so, dropped). Sealing is stateless, so any replica holding the same key
opens what another sealed, and the cache may serve stored answers: they are sealed as
they are sent.

A sealed signature is ``base64(MAGIC | tag | original)``, where ``tag`` is the first 16
bytes of HMAC-SHA256(key, tenant | 0 | original). Clients treat it as bytes, as they
treat the upstream's (the SDK decodes it and re-encodes it in either base64 alphabet).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable
from typing import Any

__all__ = ["SIGNATURE_FIELDS", "SignatureSeal", "seal_answer"]

# Both spellings: the SDK and Google's JSON write camelCase, proto3 JSON accepts snake.
SIGNATURE_FIELDS = frozenset({"thoughtSignature", "thought_signature"})
_MAGIC = b"lgs1"
_TAG_BYTES = 16


class SignatureSeal:
    """Seals the upstream's thought signatures for one tenant and opens them again."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        self._key = key

    def __repr__(self) -> str:
        return "SignatureSeal(key=**********)"

    def seal(self, tenant: str, signature: str) -> str:
        """``signature`` as the client receives it."""
        original = signature.encode("utf-8")
        return base64.b64encode(_MAGIC + self._tag(tenant, original) + original).decode("ascii")

    def open(self, tenant: str, presented: object) -> str | None:
        """The upstream's signature inside ``presented``; None if the gateway did not seal
        it for this tenant."""
        if not isinstance(presented, str):
            return None
        compact = presented.strip().replace("-", "+").replace("_", "/")
        try:
            raw = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
        except (binascii.Error, ValueError):
            return None
        if not raw.startswith(_MAGIC):
            return None
        tag = raw[len(_MAGIC) : len(_MAGIC) + _TAG_BYTES]
        original = raw[len(_MAGIC) + _TAG_BYTES :]
        if not hmac.compare_digest(tag, self._tag(tenant, original)):
            return None
        try:
            return original.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def _tag(self, tenant: str, original: bytes) -> bytes:
        message = tenant.encode("utf-8") + b"\x00" + original
        return hmac.new(self._key, message, hashlib.sha256).digest()[:_TAG_BYTES]


def seal_answer(answer: Any, seal: Callable[[str], str]) -> Any:
    """``answer`` (a response or stream event) with every part's signature sealed; the
    answer itself is not changed (a cached answer is shared), changed parts are copies."""
    if not isinstance(answer, dict):
        return answer
    candidates = answer.get("candidates")
    if not isinstance(candidates, list):
        return answer
    sealed_candidates: list[Any] = []
    changed = False
    for candidate in candidates:
        content = candidate.get("content") if isinstance(candidate, dict) else None
        if not isinstance(content, dict):
            sealed_candidates.append(candidate)
            continue
        parts = content.get("parts")
        if not isinstance(parts, list) or not any(
            isinstance(part, dict) and not SIGNATURE_FIELDS.isdisjoint(part) for part in parts
        ):
            sealed_candidates.append(candidate)
            continue
        changed = True
        sealed_parts = [_sealed_part(part, seal) for part in parts]
        sealed_candidates.append({**candidate, "content": {**content, "parts": sealed_parts}})
    return {**answer, "candidates": sealed_candidates} if changed else answer


def _sealed_part(part: Any, seal: Callable[[str], str]) -> Any:
    if not isinstance(part, dict) or SIGNATURE_FIELDS.isdisjoint(part):
        return part
    return {
        key: seal(value) if key in SIGNATURE_FIELDS and isinstance(value, str) else value
        for key, value in part.items()
    }
