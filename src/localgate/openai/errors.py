"""OpenAI's error shape: how every ``LocalgateError`` reaches an OpenAI client.

``{"error": {"message", "type", "param", "code"}}`` with the HTTP status of the error, so
the ``openai`` SDK raises its usual ``BadRequestError``, ``AuthenticationError``,
``RateLimitError``, ... Errors of the shared stages (identity, limits, redaction, the
upstream) are the same exceptions the Gemini door renders in Google's envelope.
"""

from __future__ import annotations

from typing import Any

from localgate.errors import InvalidArgument, LocalgateError

__all__ = ["InvalidParameter", "openai_error_body"]

# OpenAI's error types by HTTP status; anything else at or above 500 is a server error.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
    499: "invalid_request_error",
}
# OpenAI's codes where one exists; else the Google status, in lower case.
_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


class InvalidParameter(InvalidArgument):
    """A request parameter that is not valid or not supported; names it as ``param``."""

    def __init__(self, message: str, param: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.param = param
        self.openai_code = code


def openai_error_body(error: LocalgateError) -> dict[str, Any]:
    """The OpenAI error body for ``error``."""
    status = error.code
    if isinstance(error, InvalidParameter):
        param: str | None = error.param
        code = error.openai_code
    else:
        param = None
        code = _CODES.get(status, error.status_name.lower())
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": error.message, "type": kind, "param": param, "code": code}}
