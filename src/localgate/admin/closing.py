"""What the admin services that hold a store share: ``with Service.open(...) as service``."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["ClosingService"]


class ClosingService:
    """A service that holds a store open: usable in ``with``, which closes it."""

    def close(self) -> None:
        """Release what the service holds."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
