"""The permit the limits stage gives an admitted request, and what it is settled with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from localgate.exchange.outcome import Outcome

__all__ = ["Permit", "Settlement"]


@dataclass(frozen=True, slots=True)
class Settlement:
    """How an admitted request ended, as its permit is given back.

    ``forwarded``: whether an upstream was called (a request refused before leaving is
    charged nothing); ``tokens``: the answer's ``usageMetadata.totalTokenCount``, None
    if it gave none.
    """

    outcome: Outcome
    forwarded: bool
    tokens: int | None


class Permit(Protocol):
    """Held while a request is in flight; released once, when its answer is complete."""

    def release(self, settlement: Settlement) -> None:
        """Give the capacity back and settle the reservation to what was used."""
        ...
