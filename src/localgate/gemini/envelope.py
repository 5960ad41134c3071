"""The Gemini error envelope: how every ``LocalgateError`` reaches a Gemini client.

``{"error": {"code": <HTTP status>, "message": ..., "status": <canonical status>}}``, as
Google sends it, so the official SDK raises its usual ``ClientError``/``ServerError``. A
front door of another dialect renders the same errors in its own shape.
"""

from __future__ import annotations

from typing import Any

from localgate.errors import LocalgateError

__all__ = ["error_envelope"]


def error_envelope(error: LocalgateError) -> dict[str, Any]:
    """The Gemini error body for ``error``."""
    return {"error": {"code": error.code, "message": error.message, "status": error.status_name}}
