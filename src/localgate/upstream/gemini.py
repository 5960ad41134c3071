"""The Gemini API upstream, over aiohttp (the only module that imports it).

Driver errors are translated here into the ``LocalgateError`` tree; messages name
the upstream and what happened, never a stack trace. The gateway's own Google key
is sent as ``x-goog-api-key``; nothing of the client's credentials is forwarded.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import orjson
from yarl import URL

from localgate import __version__
from localgate.errors import (
    LocalgateError,
    ServiceUnavailable,
    UpstreamBadResponse,
    UpstreamCredentialsRejected,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from localgate.exchange.replies import StreamReply, UnaryReply, UpstreamCall
from localgate.gemini.framing import SseDecoder
from localgate.gemini.routes import GeminiRoute
from localgate.secret import Secret
from localgate.upstream.egress import Egress
from localgate.upstream.keys import KeyPool

__all__ = ["GeminiUpstream", "driver_error", "open_session", "retry_after_of"]

logger = logging.getLogger("localgate")

_MAX_ERROR_BODY = 1 << 20
_USER_AGENT = f"localgate/{__version__}"
_MAX_EVENT_BYTES = 64 << 20
# Upstream URLs are built once per route (there are a few per model).
_MAX_URLS = 1024
# Response headers that describe the upstream hop, not the answer.
_DROPPED_RESPONSE_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "content-encoding",
        "content-type",
        "server",
        "date",
        "alt-svc",
        "set-cookie",
        "vary",
        "x-xss-protection",
        "x-frame-options",
        "x-content-type-options",
        "server-timing",
    }
)
_CANONICAL = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def open_session(
    max_connections: int,
    connect_timeout_s: float,
    read_timeout_s: float,
    egress: Egress | None = None,
) -> aiohttp.ClientSession:
    """The shared, pooled HTTP client; create it in the app's lifespan and close it there.

    ``egress`` is the upstream's TLS context (trusted CAs, client certificate) and proxy.
    """
    context = egress.ssl if egress is not None and egress.ssl is not None else True
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=max_connections, ttl_dns_cache=300, ssl=context),
        proxy=egress.proxy if egress is not None else None,
        timeout=aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s
        ),
        skip_auto_headers=("User-Agent",),
        raise_for_status=False,
        # One client serves every tenant: a cookie an upstream set on one tenant's answer
        # must not ride along with the next tenant's request (it would link the two).
        cookie_jar=aiohttp.DummyCookieJar(),
    )


class GeminiUpstream:
    """Forwards Gemini REST calls to ``base_url`` with the gateway's keys.

    Several keys form a pool used round-robin; a key answered with 429 cools down for
    the upstream's Retry-After (or ``key_cooldown_s``) while the others carry on.
    """

    local = False

    def __init__(
        self,
        name: str,
        base_url: str,
        api_key: Secret | None,
        session: aiohttp.ClientSession,
        read_timeout_s: float,
        *,
        keys: Sequence[Secret] = (),
        key_cooldown_s: float = 60.0,
        key_source: str = "GEMINI_API_KEY in the gateway's environment or "
        "upstream.api_key_file in the configuration",
        clock: Callable[[], float] = time.monotonic,
        authorize: Callable[[], Awaitable[dict[str, str]]] | None = None,
        path: Callable[[GeminiRoute], str] | None = None,
        not_ready: Callable[[], str | None] | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        pool = [api_key] if api_key else []
        pool += [key for key in keys if key and key not in pool]
        self.keys = KeyPool(pool, default_cooldown_s=key_cooldown_s, clock=clock)
        self._key_source = key_source
        # Another API speaking Gemini's bodies (Vertex AI): its own credentials (headers
        # instead of a key from the pool) and its own paths.
        self._authorize = authorize
        self._path = path
        self._not_ready = not_ready
        self._session = session
        self._read_timeout_s = read_timeout_s
        self._urls: dict[tuple[GeminiRoute, bool], URL] = {}

    @property
    def ready(self) -> str | None:
        """What is missing before this upstream can be used, if anything."""
        if self._authorize is not None:
            return self._not_ready() if self._not_ready is not None else None
        if not len(self.keys):
            return f"upstream '{self.name}' has no API key: set {self._key_source}"
        return None

    async def unary(self, call: UpstreamCall) -> UnaryReply:
        """Send and read the whole answer."""
        response = await self._send(call, stream=False)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._translate(exc) from exc
        finally:
            response.release()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise UpstreamBadResponse(
                f"The upstream '{self.name}' ({self.base_url}) answered with a body that is "
                "not JSON."
            ) from exc
        return UnaryReply(body=body, headers=_passed_headers(response))

    async def stream(self, call: UpstreamCall) -> StreamReply:
        """Send with ``alt=sse`` and return the decoded events once the upstream said 200."""
        response = await self._send(call, stream=True)

        async def close() -> None:
            # close(), not release(): an unfinished stream must drop the connection so the
            # upstream stops generating for a client that went away.
            response.close()

        return StreamReply(
            events=self._events(response), close=close, headers=_passed_headers(response)
        )

    async def _events(self, response: aiohttp.ClientResponse) -> AsyncIterator[Any]:
        decoder = SseDecoder(_MAX_EVENT_BYTES)
        try:
            async for chunk in response.content.iter_any():
                for event in decoder.feed(chunk):
                    yield event
            for event in decoder.finish():
                yield event
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._translate(exc) from exc
        except ValueError as exc:
            raise UpstreamBadResponse(
                f"The upstream '{self.name}' ({self.base_url}) sent a stream that is not "
                "Server-Sent Events of JSON."
            ) from exc

    async def _send(self, call: UpstreamCall, *, stream: bool) -> aiohttp.ClientResponse:
        key_index: int | None = None
        if self._authorize is not None:
            headers = await self._authorize()
        else:
            taken = self.keys.take()
            if taken is None:
                raise ServiceUnavailable(
                    f"localgate cannot forward: {self.ready}. The request was not sent."
                )
            key_index, api_key = taken
            headers = {"x-goog-api-key": api_key.reveal()}
        headers["user-agent"] = _USER_AGENT
        if call.headers:
            headers.update(call.headers)
        method = call.route.method.http_method
        data = None
        if method == "POST":
            headers["content-type"] = "application/json"
            # Plain orjson: escaping U+2028/2029 (dump_json) is for the clients' old JSON
            # parsers; the upstream reads the same value either way. Serialised once by the
            # pipeline for the request record's digest, as a rule.
            data = call.data if call.data is not None else orjson.dumps(call.body)
        # A stream's URL carries alt=sse: in the URL kept for the route when the request has
        # no query of its own (aiohttp would encode the parameter again on every call).
        sse_in_url = stream and not call.query
        url = self._urls.get((call.route, sse_in_url))
        if url is None:
            # Parsed once: aiohttp would parse a string URL again on every call.
            path = self._path(call.route) if self._path else call.route.upstream_path
            url = URL(f"{self.base_url}/{path}")
            if sse_in_url:
                url = url.with_query(alt="sse")
            if len(self._urls) < _MAX_URLS:
                self._urls[(call.route, sse_in_url)] = url
        query: Sequence[tuple[str, str]] = (
            [*call.query, ("alt", "sse")] if stream and not sse_in_url else call.query
        )
        try:
            # Never follow redirects: a redirect would carry the Google key and the
            # prompt to whatever host the Location header names.
            response = await self._session.request(
                method,
                url,
                params=query or None,
                data=data,
                headers=headers,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._translate(exc) from exc
        if response.status != 200:
            error = await self._error(response)
            if (
                response.status == 429
                and key_index is not None
                and isinstance(error, UpstreamError)
            ):
                self.keys.cool_down(key_index, error.retry_after)
                if self.keys.wait_s() == 0:
                    # Another key is usable now: this upstream may be tried again at once.
                    error.retry_after = 0.0
            raise error
        return response

    async def _error(self, response: aiohttp.ClientResponse) -> LocalgateError:
        status = response.status
        if 300 <= status < 400:
            response.close()
            return UpstreamBadResponse(
                f"The upstream '{self.name}' ({self.base_url}) answered with a redirect "
                f"(HTTP {status}); localgate does not follow redirects."
            )
        try:
            raw = await response.content.read(_MAX_ERROR_BODY)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return self._translate(exc)
        finally:
            response.close()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if isinstance(body, list) and len(body) == 1:
            body = body[0]
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            error = body["error"]
            if not isinstance(error.get("code"), int):
                error["code"] = status
            error.setdefault("status", _CANONICAL.get(status, "UNKNOWN"))
            if _rejects_gateway_key(status, error):
                logger.error(
                    "upstream '%s' rejected the gateway's API key: HTTP %d %s",
                    self.name,
                    status,
                    error.get("status"),
                )
                return UpstreamCredentialsRejected(
                    f"The upstream '{self.name}' rejected the gateway's own API key; the "
                    "gateway operator must check GEMINI_API_KEY or upstream.api_key_file."
                )
            return UpstreamError(status, body, retry_after=retry_after_of(response, error))
        return UpstreamError(
            status,
            {
                "error": {
                    "code": status,
                    "message": f"The upstream '{self.name}' ({self.base_url}) answered HTTP "
                    f"{status} without a Gemini error body.",
                    "status": _CANONICAL.get(status, "UNKNOWN"),
                }
            },
            retry_after=retry_after_of(response, None),
        )

    def _translate(self, exc: BaseException) -> LocalgateError:
        section = "upstream" if self.name == "default" else f"upstreams.{self.name}"
        return driver_error(
            f"The upstream '{self.name}' ({self.base_url})", self._read_timeout_s, exc, section
        )


def driver_error(
    where: str, read_timeout_s: float, exc: BaseException, section: str = "upstream"
) -> LocalgateError:
    """The ``LocalgateError`` for an aiohttp failure talking to the upstream ``where``, whose
    settings are under ``section``."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return UpstreamTimeout(
            f"{where} did not answer within {read_timeout_s:g}s (upstream.timeout_s)."
        )
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        reason = getattr(exc.certificate_error, "verify_message", "") or "not trusted"
        return UpstreamUnreachable(
            f"{where} presented a certificate the gateway does not trust ({reason}); "
            f"the operator sets the CAs to trust in {section}.ca_file."
        )
    if isinstance(exc, aiohttp.ClientSSLError):
        return UpstreamUnreachable(
            f"{where} is unreachable: the TLS handshake failed (does it want a client "
            f"certificate? {section}.client_cert_file)."
        )
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return UpstreamUnreachable(
            f"{where} is unreachable: could not connect to the proxy (upstream.proxy_url "
            "or HTTPS_PROXY)."
        )
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return UpstreamUnreachable(
            f"{where} is unreachable: the proxy refused to connect to it (HTTP {exc.status})."
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamUnreachable(f"{where} is unreachable: could not connect.")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return UpstreamUnreachable(f"{where} closed the connection unexpectedly.")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return UpstreamUnreachable(f"{where} broke off its answer.")
    return UpstreamUnreachable(f"{where} is unreachable: the connection failed.")


_RETRY_DELAY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)s$")
# A wait the gateway believes: longer ones are taken as this (a day).
_MAX_RETRY_AFTER_S = 86400.0


def retry_after_of(response: aiohttp.ClientResponse, error: dict[str, Any] | None) -> float | None:
    """The wait the upstream asked for: ``Retry-After`` (seconds or a date), else the
    envelope's ``RetryInfo.retryDelay`` (``"33s"``); None if it named none."""
    header = response.headers.get("retry-after", "").strip()
    seconds: float | None = None
    if header.isdigit():
        seconds = float(header)
    elif header:
        try:
            when = email.utils.parsedate_to_datetime(header)
        except (TypeError, ValueError):
            when = None
        if when is not None and when.tzinfo is not None:
            seconds = max(0.0, when.timestamp() - time.time())
    if seconds is None and error is not None and isinstance(error.get("details"), list):
        for detail in error["details"]:
            delay = detail.get("retryDelay") if isinstance(detail, dict) else None
            found = _RETRY_DELAY.match(delay) if isinstance(delay, str) else None
            if found:
                seconds = float(found[1])
                break
    return None if seconds is None else min(seconds, _MAX_RETRY_AFTER_S)


def _rejects_gateway_key(status: int, error: dict[str, Any]) -> bool:
    if status == 401:
        return True
    details = error.get("details")
    if status != 400 or not isinstance(details, list):
        return False
    return any(
        isinstance(detail, dict) and detail.get("reason") in ("API_KEY_INVALID", "API_KEY_EXPIRED")
        for detail in details
    )


def _passed_headers(response: aiohttp.ClientResponse) -> dict[str, str]:
    # Values are passed on only if they are plain printable ASCII (0x20-0x7e).
    passed = {}
    for name, value in response.headers.items():
        lowered = name.lower()
        if lowered not in _DROPPED_RESPONSE_HEADERS and value.isascii() and value.isprintable():
            passed[lowered] = value
    return passed
