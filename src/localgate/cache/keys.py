"""Cache keys: what identifies a redacted request to the cache's exact and semantic layers.

The exact key is the hash of the whole redacted request. The fingerprint is the hash of
everything a paraphrase must not change, which a semantic hit requires to be equal: the
model, everything but the contents (system instruction, tools, settings), the earlier
turns, the last turn's role and parts other than text, and its anchors (placeholders,
numbers, and values the policy let through in clear) in the order they appear. The last
turn's text itself is compared by embedding, and only for requests that may be replayed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson

from localgate.config import CacheSettings
from localgate.gemini.texts import is_text_part, last_turn_text
from localgate.vectorstore.embedders import Vectors

__all__ = ["CacheKey", "cache_key"]

# Placeholders and numbers: the parts of a question a paraphrase must not change.
_ANCHORS = re.compile(r"\[[A-Z][A-Z0-9_]*_[0-9]+\]|[0-9]+(?:[.,][0-9]+)*")


@dataclass(slots=True)
class CacheKey:
    """What identifies a request to each layer."""

    model: str
    exact: str
    fingerprint: str
    last_turn: str
    semantic: bool
    vector: Vectors | None = None


def cache_key(
    body: dict[str, Any],
    model: str,
    settings: CacheSettings,
    kept: Collection[str] = (),
) -> CacheKey:
    """The keys of a (redacted) generateContent body.

    ``kept`` are personal data the policy let through in clear (``allow``): like
    placeholders and numbers, they must be the same, in the same order, for a
    semantic hit.
    """
    exact = _digest({"model": model, "body": body})
    contents = body.get("contents")
    turns = contents if isinstance(contents, list) else []
    last = turns[-1] if turns and isinstance(turns[-1], dict) else {}
    parts = last.get("parts")
    parts = parts if isinstance(parts, list) else []
    last_turn = last_turn_text(body)
    rest = {name: value for name, value in body.items() if name != "contents"}
    fingerprint = _digest(
        {
            "model": model,
            "rest": rest,
            "earlier": turns[:-1],
            "role": last.get("role"),
            "other_parts": [part for part in parts if not is_text_part(part)],
            "anchors": _anchors(last_turn, kept),
        }
    )
    return CacheKey(
        model=model,
        exact=exact,
        fingerprint=fingerprint,
        last_turn=last_turn,
        semantic=bool(last_turn.strip()) and _replayable(body, settings),
    )


def _anchors(text: str, kept: Collection[str]) -> list[str]:
    """Placeholders, numbers and values let through, in the order they appear."""
    found = [(match.start(), match.group()) for match in _ANCHORS.finditer(text)]
    for value in kept:
        at = text.find(value)
        while at >= 0:
            found.append((at, value))
            at = text.find(value, at + 1)
    return [token for _, token in sorted(found)]


def _replayable(body: dict[str, Any], settings: CacheSettings) -> bool:
    config = _field(body, "generationConfig", "generation_config")
    temperature = config.get("temperature") if isinstance(config, dict) else None
    # No temperature means the model's default, which samples: not a replay.
    if not isinstance(temperature, int | float) or temperature > settings.semantic.max_temperature:
        return False
    return settings.semantic.allow_tools or not body.get("tools")


def _field(body: dict[str, Any], camel: str, snake: str) -> Any:
    return body.get(camel, body.get(snake))


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()
