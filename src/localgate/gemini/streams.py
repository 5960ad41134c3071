"""Stream events of ``streamGenerateContent`` merged into the one answer they add up to."""

from __future__ import annotations

from typing import Any

from localgate.gemini.texts import is_text_part

__all__ = ["merge_stream"]


def merge_stream(events: list[Any]) -> dict[str, Any]:
    """One ``GenerateContentResponse`` holding what a stream's events said, in order."""
    merged: dict[str, Any] = {}
    candidates: dict[int, dict[str, Any]] = {}
    for event in events:
        if not isinstance(event, dict):
            continue
        for name, value in event.items():
            if name != "candidates":
                merged[name] = value  # usageMetadata, modelVersion, ...: the last wins
        for candidate in event.get("candidates") or ():
            if not isinstance(candidate, dict):
                continue
            index = candidate.get("index", 0)
            slot = candidates.setdefault(index if isinstance(index, int) else 0, {})
            for name, value in candidate.items():
                if name == "content" and isinstance(value, dict):
                    _merge_content(slot, value)
                else:
                    slot[name] = value
    if candidates:
        merged["candidates"] = [candidates[index] for index in sorted(candidates)]
    return merged


def _merge_content(slot: dict[str, Any], content: dict[str, Any]) -> None:
    merged = slot.setdefault("content", {})
    for name, value in content.items():
        if name != "parts":
            merged[name] = value
    parts: list[Any] = merged.setdefault("parts", [])
    for part in content.get("parts") or ():
        previous: dict[str, Any] = parts[-1] if parts else {}
        if (
            is_text_part(part)
            and is_text_part(previous)
            and previous.get("thought") == part.get("thought")
        ):
            parts[-1] = {**previous, "text": previous["text"] + part["text"]}
        else:
            parts.append(part)
