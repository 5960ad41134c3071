"""A string that never prints: for API keys and other credentials."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["Secret", "create_key_file", "load_key", "load_or_create_key"]


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


def load_or_create_key(environment_value: str | None, key_file: Path) -> bytes:
    """32 random bytes, base64-encoded in the environment or in ``key_file``; the file is
    created (owner-only) if neither exists."""
    if not (environment_value and environment_value.strip()) and not key_file.exists():
        create_key_file(key_file, base64.b64encode(secrets.token_bytes(32)).decode() + "\n")
    return load_key(environment_value, key_file)


def load_key(environment_value: str | None, key_file: Path) -> bytes:
    """32 bytes, base64-encoded in the environment or in ``key_file``, never created:
    ``FileNotFoundError`` if neither has one."""
    material = environment_value.strip() if environment_value else None
    if material is None:
        material = key_file.read_text().strip()
    try:
        key = base64.b64decode(material, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"the key in {key_file} is not base64") from exc
    if len(key) != 32:
        raise ValueError(f"the key in {key_file} must be 32 bytes, base64-encoded")
    return key


def create_key_file(key_file: Path, content: str) -> bool:
    """Write ``content`` to a new owner-only ``key_file``; False if one appeared meanwhile.

    Written whole to a temporary name, then linked into place: several processes starting
    at once on one data directory (``--workers``) end up with the one key that won, and none
    ever reads a half-written file.
    """
    key_file.parent.mkdir(parents=True, exist_ok=True)
    temporary = key_file.with_name(f".{key_file.name}.{secrets.token_hex(8)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, key_file)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
