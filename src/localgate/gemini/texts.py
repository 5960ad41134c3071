"""Reading a Gemini request's texts and turns, as the stages that look at them need."""

from __future__ import annotations

from typing import Any

__all__ = ["is_text_part", "last_turn_text"]


def last_turn_text(body: dict[str, Any]) -> str:
    """The text parts of the conversation's last turn (thoughts included), joined."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents or not isinstance(contents[-1], dict):
        return ""
    parts = contents[-1].get("parts")
    if not isinstance(parts, list):
        return ""
    return "\n".join(part["text"] for part in parts if is_text_part(part))


def is_text_part(part: Any) -> bool:
    """A part holding only text (a thought or not)."""
    return (
        isinstance(part, dict)
        and set(part) <= {"text", "thought"}
        and isinstance(part.get("text"), str)
    )
