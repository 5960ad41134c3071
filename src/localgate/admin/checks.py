"""One line of ``localgate doctor``: what a check found, and the fix when it failed."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["Check"]


@dataclass(frozen=True, slots=True)
class Check:
    """One check's result: ``fix`` says what to do when it failed."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None
    # Passed, but needs attention soon (a certificate about to expire); exit code stays 0.
    warning: bool = False

    def as_dict(self) -> dict[str, object]:
        """For ``--json``."""
        return asdict(self)
