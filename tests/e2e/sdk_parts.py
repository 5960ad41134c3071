"""A list of parts as the SDK's signatures name it.

A list literal of strings (or strings and parts) is inferred as ``list[str]``, which the
SDK's ``contents`` unions do not accept once Pillow is installed (its image type joins
them, and lists are invariant); this gives the list the SDK's own element type.
"""

from __future__ import annotations

from google.genai import types

__all__ = ["parts"]


def parts(*items: types.PartUnionDict) -> list[types.PartUnionDict]:
    """``items`` as a list the SDK's ``contents`` takes."""
    return list(items)
