"""Who is calling, as the identity stage establishes it and every later stage reads it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Principal"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the tenant and the key they used."""

    tenant: str
    key_id: str
