"""The one exception tree of localgate.

Every error a client can see is a ``LocalgateError``; it carries the HTTP status
and the canonical Google status string, so the front door can render the Gemini
error envelope ``{"error": {"code", "message", "status"}}`` without guessing::

    LocalgateError                       500 INTERNAL
    ├── InvalidArgument                  400 INVALID_ARGUMENT
    │   ├── PayloadTooLarge              413 INVALID_ARGUMENT
    │   ├── UnsupportedMediaType         415 INVALID_ARGUMENT
    │   └── HeaderTooLarge               431 INVALID_ARGUMENT
    ├── RequestTimeout                   408 DEADLINE_EXCEEDED
    ├── ClientClosedRequest              499 CANCELLED (logged; nobody is left to send it to)
    ├── Unauthenticated                  401 UNAUTHENTICATED
    ├── PermissionDenied                 403 PERMISSION_DENIED
    ├── NotFound                         404 NOT_FOUND
    ├── FailedPrecondition               400 FAILED_PRECONDITION
    ├── MethodNotAllowed                 405 INVALID_ARGUMENT
    ├── Unimplemented                    501 UNIMPLEMENTED
    ├── ResourceExhausted                429 RESOURCE_EXHAUSTED (names the limit; Retry-After)
    ├── ServiceUnavailable               503 UNAVAILABLE
    ├── UpstreamError                    (the upstream's own status, passed through)
    ├── UpstreamUnreachable              502 UNAVAILABLE
    ├── UpstreamBadResponse              502 UNAVAILABLE
    ├── UpstreamCredentialsRejected      502 UNAVAILABLE
    └── UpstreamTimeout                  504 DEADLINE_EXCEEDED

Messages are written for the client: they say what was wrong and what to do, and
never contain a key, a prompt, or the text of an internal exception.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "ClientClosedRequest",
    "ConfigError",
    "FailedPrecondition",
    "HeaderTooLarge",
    "InvalidArgument",
    "LocalgateError",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "RequestTimeout",
    "ResourceExhausted",
    "ServiceUnavailable",
    "Unauthenticated",
    "Unimplemented",
    "UnsupportedMediaType",
    "UpstreamBadResponse",
    "UpstreamCredentialsRejected",
    "UpstreamError",
    "UpstreamTimeout",
    "UpstreamUnreachable",
]


class LocalgateError(Exception):
    """Base of every error a client can receive; renders as a Gemini error envelope."""

    http_status: ClassVar[int] = 500
    status: ClassVar[str] = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def code(self) -> int:
        """The HTTP status this error is sent with (equal to ``error.code``)."""
        return self.http_status

    @property
    def status_name(self) -> str:
        """The canonical status string sent with it (``error.status``)."""
        return self.status


class InvalidArgument(LocalgateError):
    """The request is malformed or not a valid Gemini request."""

    http_status = 400
    status = "INVALID_ARGUMENT"


class PayloadTooLarge(InvalidArgument):
    """The request body is larger than ``server.max_body_bytes``."""

    http_status = 413


class UnsupportedMediaType(InvalidArgument):
    """The request body is declared as something other than JSON."""

    http_status = 415


class HeaderTooLarge(InvalidArgument):
    """The request line and headers together exceed ``server.max_header_bytes``."""

    http_status = 431


class RequestTimeout(LocalgateError):
    """The client did not send its whole request in time (``server.*_timeout_s``)."""

    http_status = 408
    status = "DEADLINE_EXCEEDED"


class ClientClosedRequest(LocalgateError):
    """The client went away before its request was read whole (nginx's 499)."""

    http_status = 499
    status = "CANCELLED"


class Unauthenticated(LocalgateError):
    """No localgate key, or one the gateway does not know."""

    http_status = 401
    status = "UNAUTHENTICATED"


class PermissionDenied(LocalgateError):
    """The caller is known but not allowed to do this (revoked key, Files API, ...)."""

    http_status = 403
    status = "PERMISSION_DENIED"


class NotFound(LocalgateError):
    """The path is not a route localgate serves; nothing is forwarded."""

    http_status = 404
    status = "NOT_FOUND"


class FailedPrecondition(LocalgateError):
    """The operation cannot run in the state things are in (a key file not readable here, a
    record no signed checkpoint covers yet); the message says what to do first."""

    http_status = 400
    status = "FAILED_PRECONDITION"


class MethodNotAllowed(LocalgateError):
    """The path exists but not with this HTTP method."""

    http_status = 405
    status = "INVALID_ARGUMENT"

    def __init__(self, message: str, allowed: tuple[str, ...]) -> None:
        super().__init__(message)
        self.allowed = allowed


class Unimplemented(LocalgateError):
    """The HTTP method is not one the gateway knows at all."""

    http_status = 501
    status = "UNIMPLEMENTED"


class ResourceExhausted(LocalgateError):
    """A limit of the tenant or key is reached (requests per minute, tokens per day, ...).

    ``headers`` go out with the refusal: ``Retry-After`` (whole seconds) and the
    ``x-ratelimit-*`` headers every answer carries.
    """

    http_status = 429
    status = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers = headers or {}


class ServiceUnavailable(LocalgateError):
    """The gateway cannot serve the request now (missing upstream key, store down)."""

    http_status = 503
    status = "UNAVAILABLE"


class UpstreamError(LocalgateError):
    """The upstream answered with an error; its status and envelope pass through."""

    def __init__(
        self, http_status: int, body: dict[str, Any], *, retry_after: float | None = None
    ) -> None:
        error = body.get("error", {})
        super().__init__(str(error.get("message", "")))
        self._http_status = http_status
        self._status = str(error.get("status", "UNKNOWN"))
        self.body = body
        # Seconds to wait before this upstream may be asked again: what it said
        # (Retry-After, RetryInfo), or 0 when another of its keys is usable now.
        self.retry_after = retry_after

    @property
    def code(self) -> int:
        """The upstream's HTTP status."""
        return self._http_status

    @property
    def status_name(self) -> str:
        """The upstream's canonical status string."""
        return self._status

    def envelope(self) -> dict[str, Any]:
        """The upstream's own error body, unchanged."""
        return self.body


class UpstreamUnreachable(LocalgateError):
    """The upstream could not be reached (refused, reset, DNS, TLS)."""

    http_status = 502
    status = "UNAVAILABLE"


class UpstreamBadResponse(LocalgateError):
    """The upstream answered 200 with a body that is not a Gemini response."""

    http_status = 502
    status = "UNAVAILABLE"


class UpstreamCredentialsRejected(LocalgateError):
    """The upstream refused the gateway's own key: the operator's problem, not the client's."""

    http_status = 502
    status = "UNAVAILABLE"


class UpstreamTimeout(LocalgateError):
    """The upstream did not answer within the configured timeout."""

    http_status = 504
    status = "DEADLINE_EXCEEDED"


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` lists ``field.path: reason`` lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(problems))
        self.source = source
        self.problems = problems
