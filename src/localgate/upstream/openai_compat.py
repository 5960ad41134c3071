"""An OpenAI-compatible server (vLLM, Ollama, llama.cpp, …) as an upstream for Gemini
requests: ``upstreams.<name>.kind: openai`` (docs/openai-upstreams.md).

The pipeline carries Gemini requests; this adapter sends them as ``/chat/completions``
(streamed as Server-Sent Events ending in ``[DONE]``) and ``/embeddings``, and turns the
answers back into Gemini's shape, so a client on the google-genai SDK sees a Gemini
answer. ``countTokens`` is answered here with the gateway's own estimate (the limits'
estimator: OpenAI's API has no token counting). The server's errors become Gemini error
envelopes with the statuses the dispatcher retries and falls back on (429 with its
Retry-After, 5xx); a stream that breaks off raises, and the client gets an error event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import aiohttp
import orjson
from yarl import URL

from localgate import __version__
from localgate.errors import (
    InvalidArgument,
    LocalgateError,
    NotFound,
    ServiceUnavailable,
    UpstreamBadResponse,
    UpstreamCredentialsRejected,
    UpstreamError,
    UpstreamUnreachable,
)
from localgate.exchange.replies import StreamReply, UnaryReply, UpstreamCall
from localgate.gemini.routes import GeminiMethod, GeminiRoute
from localgate.secret import Secret
from localgate.upstream.gemini import driver_error, retry_after_of
from localgate.upstream.keys import KeyPool
from localgate.upstream.openai_answer import (
    CANONICAL_STATUS,
    ChunkTranslator,
    embeddings_answer,
    gemini_answer,
)
from localgate.upstream.openai_request import chat_request, embeddings_request

__all__ = ["OpenAICompatUpstream"]

logger = logging.getLogger("localgate")

_MAX_ERROR_BODY = 1 << 20
_MAX_EVENT_BYTES = 64 << 20
# The part of the server's own error message a client sees.
_MAX_MESSAGE = 500
# /readyz waits at most this long for the probe (a hanging server must not hang /readyz).
_PROBE_TIMEOUT_S = 5.0
_GENERATING = ("generateContent", "streamGenerateContent", "countTokens")
_EMBEDDING = ("embedContent", "batchEmbedContents")


class OpenAICompatUpstream:
    """Gemini requests to an OpenAI-compatible server, and its answers back as Gemini's.

    ``models`` maps the Gemini names clients ask for to the server's names (empty: names
    pass unchanged). ``redaction`` False lets requests whose every candidate is such an
    upstream skip redaction (the router decides, the dispatcher enforces it).
    ``estimate`` counts a body's tokens for ``countTokens``.
    """

    local = False

    def __init__(
        self,
        name: str,
        base_url: str,
        session: aiohttp.ClientSession,
        read_timeout_s: float,
        estimate: Callable[[Any], int],
        *,
        keys: Sequence[Secret] = (),
        key_cooldown_s: float = 60.0,
        models: dict[str, str] | None = None,
        redaction: bool = True,
        probe_interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.redaction = redaction
        self.models = dict(models or {})
        self.keys = KeyPool(list(keys), default_cooldown_s=key_cooldown_s, clock=clock)
        self._session = session
        self._read_timeout_s = read_timeout_s
        self._estimate = estimate
        self._clock = clock
        self._probe_interval_s = probe_interval_s
        self._probed_at: float | None = None
        self._probe_problem: str | None = None
        self._served: tuple[str, ...] = ()
        self._where = f"The upstream '{name}' ({self.base_url})"

    @property
    def ready(self) -> str | None:
        """Nothing to configure beyond the URL (a key is optional): always usable."""
        return None

    # -- the Gemini routes ------------------------------------------------------------

    async def unary(self, call: UpstreamCall) -> UnaryReply:
        """Answer one Gemini call through the server (countTokens: estimated here)."""
        method = call.route.method
        if method is GeminiMethod.GENERATE_CONTENT:
            body = chat_request(call.body, self._model(call.route), stream=False)
            answer = await self._post("chat/completions", body)
            return UnaryReply(body=gemini_answer(answer, _turns(call.body), self._where))
        if method is GeminiMethod.COUNT_TOKENS:
            self._model(call.route)
            return UnaryReply(body={"totalTokens": self._estimate(call.body)})
        if method in (GeminiMethod.EMBED_CONTENT, GeminiMethod.BATCH_EMBED_CONTENTS):
            return await self._embed(call)
        if method is GeminiMethod.LIST_MODELS:
            return UnaryReply(body={"models": await self.catalogue()})
        if method is GeminiMethod.GET_MODEL:
            wanted = call.route.model
            for entry in await self.catalogue():
                if entry["name"] == wanted:
                    return UnaryReply(body=entry)
            raise NotFound(f"{wanted} is not a model of the upstream '{self.name}'.")
        raise InvalidArgument(
            f"The upstream '{self.name}' (OpenAI-compatible) does not answer {method.value} "
            "as a unary call."
        )

    async def stream(self, call: UpstreamCall) -> StreamReply:
        """``streamGenerateContent`` as a streamed chat completion."""
        if call.route.method is not GeminiMethod.STREAM_GENERATE_CONTENT:
            raise InvalidArgument(f"{call.route.method.value} does not stream.")
        body = chat_request(call.body, self._model(call.route), stream=True)
        response = await self._send("POST", "chat/completions", body)

        async def close() -> None:
            # close(), not release(): the server stops generating for a client gone away.
            response.close()

        translator = ChunkTranslator(_turns(call.body), self._where)
        return StreamReply(events=self._events(response, translator), close=close)

    async def catalogue(self) -> list[dict[str, Any]]:
        """The models clients may ask this upstream for, as Gemini ``Model`` objects: the
        configured names, or (without a mapping) what the server's ``/models`` lists."""
        if self.models:
            pairs = sorted(self.models.items())
        else:
            problem = await self.probe()
            if problem is not None and not self._served:
                raise ServiceUnavailable(f"{self._where} cannot list its models: {problem}.")
            pairs = [(served, served) for served in self._served]
        return [
            {
                "name": f"models/{gemini_name}",
                "version": "openai-compatible",
                "displayName": local_name,
                "description": (
                    f"Served by the gateway's upstream '{self.name}' (OpenAI-compatible) "
                    f"as {local_name}."
                ),
                "supportedGenerationMethods": [*_GENERATING, *_EMBEDDING],
            }
            for gemini_name, local_name in pairs
        ]

    async def probe(self) -> str | None:
        """Whether the server answers ``GET /models`` (at most once per interval): None
        when it does, else what went wrong (for ``/readyz``)."""
        now = self._clock()
        if self._probed_at is not None and now - self._probed_at < self._probe_interval_s:
            return self._probe_problem
        self._probed_at = now
        try:
            async with asyncio.timeout(_PROBE_TIMEOUT_S):
                listing = await self._request("GET", "models", None)
        except LocalgateError as exc:
            self._probe_problem = _short(exc.message)
            return self._probe_problem
        except TimeoutError:
            self._probe_problem = f"GET /models did not answer within {_PROBE_TIMEOUT_S:g}s"
            return self._probe_problem
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list):
            self._probe_problem = "GET /models did not answer a model list"
            return self._probe_problem
        self._served = tuple(
            item["id"]
            for item in data
            if isinstance(item, dict) and isinstance(item.get("id"), str) and _listable(item["id"])
        )
        self._probe_problem = None
        return None

    # -- the wire -----------------------------------------------------------------------

    def _model(self, route: GeminiRoute) -> str:
        model = route.model_id or ""
        if not self.models:
            return model
        local = self.models.get(model)
        if local is None:
            raise NotFound(
                f"The model {model} is not served by the upstream '{self.name}'; it serves "
                f"{', '.join(sorted(self.models))}."
            )
        return local

    async def _embed(self, call: UpstreamCall) -> UnaryReply:
        batch = call.route.method is GeminiMethod.BATCH_EMBED_CONTENTS
        body = call.body if isinstance(call.body, dict) else {}
        if batch:
            requests = body.get("requests")
            if not isinstance(requests, list) or not requests:
                raise InvalidArgument("requests: at least one embedding request is required.")
        else:
            requests = [body]
        answer = await self._post(
            "embeddings", embeddings_request(requests, self._model(call.route))
        )
        return UnaryReply(body=embeddings_answer(answer, len(requests), batch, self._where))

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        return await self._request("POST", path, body)

    async def _request(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        response = await self._send(method, path, body)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise driver_error(
                self._where, self._read_timeout_s, exc, f"upstreams.{self.name}"
            ) from exc
        finally:
            response.release()
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise UpstreamBadResponse(
                f"{self._where} answered with a body that is not JSON."
            ) from exc

    async def _send(
        self, method: str, path: str, body: dict[str, Any] | None
    ) -> aiohttp.ClientResponse:
        headers = {"user-agent": f"localgate/{__version__}", "accept": "application/json"}
        key_index: int | None = None
        if len(self.keys):
            taken = self.keys.take()
            if taken is None:
                wait = self.keys.wait_s()
                raise UpstreamError(
                    429,
                    _envelope(
                        429,
                        f"Every API key of the upstream '{self.name}' is cooling "
                        f"down after a 429; try again in {wait:.0f}s.",
                    ),
                    retry_after=wait,
                )
            key_index, key = taken
            headers["authorization"] = f"Bearer {key.reveal()}"
        data = None
        if body is not None:
            headers["content-type"] = "application/json"
            data = orjson.dumps(body)
        try:
            # Never follow redirects: one would carry the prompt wherever Location says.
            response = await self._session.request(
                method,
                URL(f"{self.base_url}/{path}"),
                data=data,
                headers=headers,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise driver_error(
                self._where, self._read_timeout_s, exc, f"upstreams.{self.name}"
            ) from exc
        if response.status != 200:
            error = await self._error(response)
            if (
                response.status == 429
                and key_index is not None
                and isinstance(error, UpstreamError)
            ):
                self.keys.cool_down(key_index, error.retry_after)
                if self.keys.wait_s() == 0:
                    error.retry_after = 0.0  # another key is usable now
            raise error
        return response

    async def _events(
        self, response: aiohttp.ClientResponse, translator: ChunkTranslator
    ) -> AsyncIterator[Any]:
        lines = _SseLines(_MAX_EVENT_BYTES)
        try:
            async for chunk in response.content.iter_any():
                for data in lines.feed(chunk):
                    if data == b"[DONE]":
                        translator.done = True
                        break
                    for event in translator.chunk(self._chunk(data)):
                        yield event
                if translator.done:
                    break
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise driver_error(
                self._where, self._read_timeout_s, exc, f"upstreams.{self.name}"
            ) from exc
        except ValueError as exc:
            raise UpstreamBadResponse(
                f"{self._where} sent a stream that is not Server-Sent Events of JSON."
            ) from exc
        if not translator.done and not translator.complete:
            raise UpstreamUnreachable(f"{self._where} broke off its answer.")
        for event in translator.finish():
            yield event

    def _chunk(self, data: bytes) -> Any:
        chunk = orjson.loads(data)
        if isinstance(chunk, dict) and chunk.get("error") is not None:
            # vLLM reports a failure mid-stream as an event of its own.
            error = chunk["error"]
            code = error.get("code") if isinstance(error, dict) else None
            status = code if isinstance(code, int) and 400 <= code < 600 else 500
            raise UpstreamError(status, _envelope(status, self._said(status, error)))
        return chunk

    async def _error(self, response: aiohttp.ClientResponse) -> LocalgateError:
        status = response.status
        if 300 <= status < 400:
            response.close()
            return UpstreamBadResponse(
                f"{self._where} answered with a redirect (HTTP {status}); localgate does not "
                "follow redirects."
            )
        try:
            raw = await response.content.read(_MAX_ERROR_BODY)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return driver_error(self._where, self._read_timeout_s, exc, f"upstreams.{self.name}")
        finally:
            response.close()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if status in (401, 403):
            logger.error(
                "upstream '%s' refused the gateway's credentials: HTTP %d", self.name, status
            )
            return UpstreamCredentialsRejected(
                f"The upstream '{self.name}' refused the gateway's credentials; the gateway "
                f"operator must check upstreams.{self.name}.api_key_env or api_key_file."
            )
        # OpenAI and Ollama: {"error": {"message", ...}}; vLLM: {"object": "error", "message"}.
        detail = body.get("error", body) if isinstance(body, dict) else None
        return UpstreamError(
            status,
            _envelope(status, self._said(status, detail)),
            retry_after=retry_after_of(response, None),
        )

    def _said(self, status: int, detail: Any) -> str:
        message = detail.get("message") if isinstance(detail, dict) else None
        if isinstance(detail, str):
            message = detail
        said = f": {_short(message)}" if isinstance(message, str) and message else ""
        return f"{self._where} answered HTTP {status}{said}"


class _SseLines:
    """The ``data`` of each Server-Sent Event, as bytes (``[DONE]`` is not JSON)."""

    def __init__(self, max_event_bytes: int) -> None:
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        events: list[bytes] = []
        start = 0
        while (end := self._buffer.find(b"\n", start)) >= 0:
            line = bytes(self._buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data.clear()
            elif line.startswith(b"data:"):
                self._data.append(line[5:].removeprefix(b" "))
            elif not line.startswith((b":", b"event:", b"id:", b"retry:")):
                raise ValueError("not Server-Sent Events")
        del self._buffer[:start]
        if len(self._buffer) + sum(map(len, self._data)) > self._max:
            raise ValueError(f"a stream event exceeds {self._max} bytes")
        return events


def _envelope(status: int, message: str) -> dict[str, Any]:
    return {
        "error": {
            "code": status,
            "message": message,
            "status": CANONICAL_STATUS.get(status, "UNKNOWN"),
        }
    }


def _turns(body: Any) -> int:
    """The index the answer will have among the conversation's contents."""
    contents = body.get("contents") if isinstance(body, dict) else None
    return len(contents) if isinstance(contents, list) else 0


def _short(message: str) -> str:
    text = " ".join(message.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def _listable(name: str) -> bool:
    # A name a client could put in the path (Ollama's llama3:8b has a colon: map it).
    return bool(name) and len(name) <= 128 and all(c.isalnum() or c in "._@-" for c in name)
