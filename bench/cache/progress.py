"""Progress lines for whoever runs the benchmark, on standard error."""

from __future__ import annotations

import sys

__all__ = ["progress"]


def progress(message: str) -> None:
    """One line on standard error, flushed at once (a run takes minutes)."""
    print(f"bench: {message}", file=sys.stderr, flush=True)
