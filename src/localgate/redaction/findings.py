"""What a detector reports: a span, a type and a confidence. Never the value itself."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Finding"]


@dataclass(frozen=True, slots=True, order=True)
class Finding:
    """One detected entity at ``text[start:end]`` (offsets into the original string)."""

    start: int
    end: int
    type: str
    score: float = 1.0
