"""The permit the limits stage gives an admitted request."""

from __future__ import annotations

from typing import Protocol

__all__ = ["Permit"]


class Permit(Protocol):
    """Held while a request is in flight; released once, when its answer is complete."""

    def release(self) -> None:
        """Give the capacity back."""
        ...
