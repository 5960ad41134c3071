"""A string that never prints: for API keys and other credentials."""

from __future__ import annotations

__all__ = ["Secret"]


class Secret:
    """Wraps a secret value so that ``str``, ``repr`` and logs show only stars."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself; call only where it is sent or compared."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    def __str__(self) -> str:
        return "**********"

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)
