"""Vertex AI: regional endpoints, and service-account credentials through google-auth (the
only module importing it).

Vertex serves the Gemini models with the same request and answer bodies under another path,
``v1/projects/{project}/locations/{location}/publishers/google/models/{model}:{method}``,
and takes an OAuth access token instead of an API key. The token is obtained from the
service account's ``token_uri`` and refreshed five minutes before it expires, in a worker
thread (google-auth's refresh is blocking), one refresh at a time.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping
from email.message import Message
from pathlib import Path
from typing import Any

import google.auth.exceptions
import google.auth.transport
from google.oauth2 import service_account

from localgate.errors import ServiceUnavailable, Unimplemented, UpstreamCredentialsRejected
from localgate.gemini.routes import GeminiMethod, GeminiRoute

__all__ = ["VERTEX_METHODS", "ServiceAccountTokens", "VertexPaths"]

logger = logging.getLogger("localgate")

_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
# A token this close to its expiry is refreshed before it is used.
_REFRESH_AHEAD = datetime.timedelta(minutes=5)
_TOKEN_TIMEOUT_S = 30.0
VERTEX_METHODS = frozenset(
    {
        GeminiMethod.GENERATE_CONTENT,
        GeminiMethod.STREAM_GENERATE_CONTENT,
        GeminiMethod.COUNT_TOKENS,
    }
)


class VertexPaths:
    """Builds the Vertex AI path of a Gemini route for one project and location."""

    def __init__(self, upstream: str, project: str, location: str) -> None:
        self._upstream = upstream
        self._prefix = f"v1/projects/{project}/locations/{location}/publishers/google/models"

    def __call__(self, route: GeminiRoute) -> str:
        """``v1/projects/…/models/{model}:{method}``; Unimplemented for other routes."""
        if route.method not in VERTEX_METHODS or route.model_id is None:
            raise Unimplemented(
                f"The upstream '{self._upstream}' (Vertex AI) serves generateContent, "
                f"streamGenerateContent and countTokens, not {route.method.value}; the gateway "
                "operator can route that model elsewhere."
            )
        return f"{self._prefix}/{route.model_id}:{route.method.value}"


class ServiceAccountTokens:
    """Access tokens of one service account, refreshed before they expire."""

    def __init__(self, upstream: str, credentials_file: Path) -> None:
        self._upstream = upstream
        self._lock = asyncio.Lock()
        self.problem: str | None = None
        self._credentials: Any = None
        try:
            self._credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                str(credentials_file), scopes=_SCOPES
            )
        except (OSError, ValueError, KeyError) as exc:
            # The reason names the file, never its content.
            self.problem = (
                f"upstream '{upstream}': cannot use the service-account file "
                f"{credentials_file} ({type(exc).__name__})"
            )

    async def headers(self) -> dict[str, str]:
        """The ``Authorization`` header, with a token valid for at least five more minutes."""
        credentials = self._credentials
        if credentials is None:
            raise ServiceUnavailable(f"localgate cannot forward: {self.problem}.")
        if self._fresh():
            return {"authorization": f"Bearer {credentials.token}"}
        async with self._lock:
            if not self._fresh():
                try:
                    await asyncio.to_thread(credentials.refresh, _UrllibRequest())
                except google.auth.exceptions.GoogleAuthError as exc:
                    logger.error(
                        "upstream '%s': the service account's token could not be refreshed: %s",
                        self._upstream,
                        type(exc).__name__,
                    )
                    raise UpstreamCredentialsRejected(
                        f"The upstream '{self._upstream}' (Vertex AI) did not grant the "
                        "gateway's service account a token; the gateway operator must check "
                        "its credentials_file."
                    ) from exc
        return {"authorization": f"Bearer {credentials.token}"}

    def _fresh(self) -> bool:
        credentials = self._credentials
        expiry = credentials.expiry  # naive UTC, as google-auth keeps it
        if credentials.token is None or expiry is None:
            return bool(credentials.token) and expiry is None
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        return bool(expiry - now > _REFRESH_AHEAD)


class _UrllibResponse(google.auth.transport.Response):
    def __init__(self, status: int, headers: Message, data: bytes) -> None:
        self._status = status
        self._headers = dict(headers.items())
        self._data = data

    @property
    def status(self) -> int:
        return self._status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._headers

    @property
    def data(self) -> bytes:
        return self._data


class _UrllibRequest(google.auth.transport.Request):
    """google-auth's transport over the standard library (token refreshes only)."""

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> _UrllibResponse:
        request = urllib.request.Request(  # noqa: S310 - the token_uri of the operator's file
            url, data=body, headers=dict(headers or {}), method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout or _TOKEN_TIMEOUT_S) as answer:  # noqa: S310
                return _UrllibResponse(answer.status, answer.headers, answer.read())
        except urllib.error.HTTPError as exc:
            return _UrllibResponse(exc.code, exc.headers, exc.read())
        except (urllib.error.URLError, OSError) as exc:
            failure = google.auth.exceptions.TransportError(type(exc).__name__)  # type: ignore[no-untyped-call]
            raise failure from exc
