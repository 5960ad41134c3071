"""A real HTTP server on loopback standing in for the Gemini API.

It answers the routes localgate forwards with small, well-formed Gemini responses,
records every request it receives (path, query, headers, JSON body), and can be told
to misbehave: answer an error, stream slowly, reset the connection, send a body that
is not JSON, or hang. Runs on its own event loop in a background thread, so tests
and benchmarks can drive the gateway with blocking clients.

    with FakeGemini() as fake:
        ... point localgate at fake.base_url ...
        fake.requests[-1].headers["x-goog-api-key"]
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from localgate.testing.loopback import LoopbackServer

__all__ = ["HOLD_LIMIT_S", "FakeGemini", "RecordedRequest"]

# How long a held stream waits for its release before it is broken off.
HOLD_LIMIT_S = 30.0


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the fake upstream received it."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    headers: dict[str, str]
    body: Any
    # Over HTTPS: the client certificate the caller presented (``getpeercert()``), if any.
    peer_certificate: dict[str, Any] | None = None


@dataclass(slots=True)
class _Behaviour:
    error: tuple[int, bytes, dict[str, str]] | None = None  # status, body, headers
    error_times: int | None = None  # the error answers only this many more requests
    mode: str | None = None  # "reset", "malformed", "hang"
    stream_chunks: list[str] = field(default_factory=lambda: ["Hello", " from", " fake"])
    stream_delay_s: float = 0.0
    stream_error_after: int | None = None  # break the stream after this many events
    stream_hold: threading.Event | None = None  # send the events after the first once set
    echo_chunk: int | None = None  # stream the request's last text back in pieces this long
    delay_s: float = 0.0
    model_version: str | None = None  # modelVersion in answers; None = the model's name
    signature: str | None = None  # a thoughtSignature on the answer's (last event's) part
    # A scripted answer: these parts (a stream sends one an event), this finishReason and
    # usageMetadata, instead of the echo.
    parts: list[dict[str, Any]] | None = None
    finish_reason: str = "STOP"
    usage: dict[str, Any] | None = None

    # candidates[].avgLogprobs by model (the path's model id); "*" for any other model
    avg_logprobs: dict[str, float] | None = None


class FakeGemini(LoopbackServer):
    """The fake Gemini API server; use as a context manager or call start()/stop()."""

    thread_name = "fake-gemini"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        record: bool = True,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        # Serves HTTPS with ssl_context (its certificate; client certificates if it asks).
        super().__init__(host, port, ssl_context)
        self.record = record
        self.requests: list[RecordedRequest] = []
        self.stream_abandoned = threading.Event()
        self._behaviour = _Behaviour()
        self._lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The URL to configure as the gateway's upstream."""
        scheme = "http" if self.ssl_context is None else "https"
        return f"{scheme}://{self.host}:{self.port}"

    # -- behaviour --------------------------------------------------------------

    def reset(self) -> None:
        """Forget recorded requests and return to well-behaved answers."""
        with self._lock:
            self.requests.clear()
            self._behaviour = _Behaviour()
        self.stream_abandoned.clear()

    def fail_with(
        self,
        status: int,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        times: int | None = None,
    ) -> None:
        """Answer every request (or the next ``times``) with ``status`` and ``body`` (a dict
        or list is sent as JSON); afterwards, answer well again."""
        if isinstance(body, bytes | str):
            raw = body.encode() if isinstance(body, str) else body
            ctype = "text/html"
        else:
            raw = orjson.dumps(body)
            ctype = "application/json; charset=UTF-8"
        with self._lock:
            self._behaviour.error = (status, raw, {"content-type": ctype, **(headers or {})})
            self._behaviour.error_times = times

    def misbehave(self, mode: str | None) -> None:
        """``reset`` the connection, answer ``malformed`` JSON, or ``hang`` without answering."""
        if mode not in (None, "reset", "malformed", "hang"):
            raise ValueError(f"unknown mode {mode!r}")
        with self._lock:
            self._behaviour.mode = mode

    def stream(
        self,
        chunks: list[str],
        delay_s: float = 0.0,
        error_after: int | None = None,
        hold: threading.Event | None = None,
    ) -> None:
        """Make streams send these text chunks, ``delay_s`` apart, optionally breaking off.

        With ``hold``, the first event is sent and the rest only once ``hold`` is set, so a
        test can see what arrived meanwhile without guessing how long that takes; if it is
        not set within ``HOLD_LIMIT_S``, the stream is broken off instead.
        """
        with self._lock:
            self._behaviour.stream_chunks = list(chunks)
            self._behaviour.stream_delay_s = delay_s
            self._behaviour.stream_error_after = error_after
            self._behaviour.stream_hold = hold

    def echo_stream(self, chunk_chars: int) -> None:
        """Make streams send the request's last text back, ``chunk_chars`` characters an event."""
        with self._lock:
            self._behaviour.echo_chunk = chunk_chars

    def delay(self, seconds: float) -> None:
        """Wait this long before answering any request (a fixed upstream latency)."""
        with self._lock:
            self._behaviour.delay_s = seconds

    def answer_as(self, model_version: str | None) -> None:
        """Say this ``modelVersion`` in answers (as after a model update), or the model's name."""
        with self._lock:
            self._behaviour.model_version = model_version

    def sign_with(self, signature: str | None) -> None:
        """Put this ``thoughtSignature`` on the answer's part (a stream's last event), as
        Gemini 3 models do; None for none."""
        with self._lock:
            self._behaviour.signature = signature

    def reply_with(
        self,
        parts: list[dict[str, Any]],
        finish_reason: str = "STOP",
        usage: dict[str, Any] | None = None,
    ) -> None:
        """Answer generateContent with these parts (a stream: one event per part, the last
        with ``finish_reason`` and ``usage``) instead of echoing, e.g. function calls."""
        with self._lock:
            self._behaviour.parts = [dict(part) for part in parts]
            self._behaviour.finish_reason = finish_reason
            self._behaviour.usage = usage

    def logprobs(self, by_model: dict[str, float] | None) -> None:
        """Give answers ``candidates[].avgLogprobs``: the value of the path's model, else of
        ``"*"`` (a stream carries it on every event); None for none."""
        with self._lock:
            self._behaviour.avg_logprobs = dict(by_model) if by_model else None

    def use_tokens(self, usage: dict[str, int] | None) -> None:
        """Put this ``usageMetadata`` on answers (a stream's last event); None: the usual."""
        with self._lock:
            self._behaviour.usage = usage

    # -- server -------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = orjson.loads(raw) if raw else None
        with self._lock:
            if self.record:
                self.requests.append(
                    RecordedRequest(
                        method=request.method,
                        path=request.path,
                        query=tuple(request.query.items()),
                        headers={name.lower(): value for name, value in request.headers.items()},
                        body=body,
                        peer_certificate=(
                            request.transport.get_extra_info("peercert")
                            if request.transport is not None
                            else None
                        ),
                    )
                )
            behaviour = _Behaviour(
                **{name: getattr(self._behaviour, name) for name in _Behaviour.__slots__}
            )
            if self._behaviour.error_times is not None:
                self._behaviour.error_times -= 1
                if self._behaviour.error_times <= 0:
                    self._behaviour.error, self._behaviour.error_times = None, None
        if behaviour.delay_s:
            await asyncio.sleep(behaviour.delay_s)
        if behaviour.mode == "hang":
            await asyncio.sleep(3600)
        if behaviour.mode == "reset":
            transport = request.transport
            if transport is not None:
                transport.abort()
            raise asyncio.CancelledError
        if behaviour.error is not None:
            status, payload, headers = behaviour.error
            return web.Response(status=status, body=payload, headers=headers)
        if behaviour.mode == "malformed":
            return web.Response(body=b"<html>not json", content_type="application/json")
        path = request.path
        if path.endswith(":streamGenerateContent"):
            return await self._stream(request, behaviour)
        answer = self._answer(request.method, path, body, behaviour)
        if answer is None:
            error = {"code": 404, "message": f"fake: no route {path}", "status": "NOT_FOUND"}
            return web.json_response({"error": error}, status=404)
        return _json(answer)

    def _answer(self, method: str, path: str, body: Any, behaviour: _Behaviour) -> Any:
        model = _model_id(path)
        if path.endswith(":generateContent") and behaviour.parts is not None:
            return _scripted(behaviour.parts, behaviour, behaviour.model_version or model)
        if path.endswith(":generateContent"):
            version = behaviour.model_version or model
            answer = _generate_response(f"echo: {_last_text(body)}", version, final=True)
            _with_logprobs(answer, model, behaviour.avg_logprobs)
            if behaviour.usage is not None:
                answer["usageMetadata"] = dict(behaviour.usage)
            return _signed(answer, behaviour.signature)
        if path.endswith(":countTokens"):
            return {"totalTokens": len(_last_text(body).split()) or 1}
        if path.endswith(":embedContent"):
            return {"embedding": {"values": [0.1, 0.2, 0.3]}}
        if path.endswith(":batchEmbedContents"):
            count = len(body.get("requests", [])) if isinstance(body, dict) else 0
            return {"embeddings": [{"values": [0.1 * i, 0.2, 0.3]} for i in range(count)]}
        if method == "GET" and path.rstrip("/").endswith(("/models", "/tunedModels")):
            return {"models": [_model("gemini-2.5-flash"), _model("gemini-embedding-001")]}
        if method == "GET" and ("/models/" in path or "/tunedModels/" in path):
            return _model(path.rsplit("/", 1)[-1])
        return None

    async def _stream(self, request: web.Request, behaviour: _Behaviour) -> web.StreamResponse:
        model = behaviour.model_version or _model_id(request.path)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        if behaviour.parts is not None:
            parts = behaviour.parts
            for index, part in enumerate(parts):
                event = _scripted([part], behaviour, model, final=index == len(parts) - 1)
                await response.write(b"data: " + orjson.dumps(event) + b"\r\n\r\n")
            await response.write_eof()
            return response
        chunks = behaviour.stream_chunks
        if behaviour.echo_chunk:
            text = _last_text(orjson.loads(await request.read() or b"null"))
            size = behaviour.echo_chunk
            chunks = [text[i : i + size] for i in range(0, len(text), size)] or [""]
        try:
            for index, text in enumerate(chunks):
                if (
                    behaviour.stream_error_after is not None
                    and index >= behaviour.stream_error_after
                ):
                    transport = request.transport
                    if transport is not None:
                        transport.abort()
                    return response
                if index and behaviour.stream_delay_s:
                    await asyncio.sleep(behaviour.stream_delay_s)
                if index == 1 and behaviour.stream_hold is not None:
                    released = await asyncio.to_thread(behaviour.stream_hold.wait, HOLD_LIMIT_S)
                    if not released:
                        transport = request.transport
                        if transport is not None:
                            transport.abort()
                        return response
                final = index == len(chunks) - 1
                event = _generate_response(text, model, final=final)
                _with_logprobs(event, _model_id(request.path), behaviour.avg_logprobs)
                if final:
                    event = _signed(event, behaviour.signature)
                    if behaviour.usage is not None:
                        event["usageMetadata"] = dict(behaviour.usage)
                await response.write(b"data: " + orjson.dumps(event) + b"\r\n\r\n")
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.stream_abandoned.set()
            raise
        return response


def _model_id(path: str) -> str:
    """``gemini-2.5-flash`` from ``/v1beta/models/gemini-2.5-flash:generateContent``, as
    Gemini writes ``modelVersion`` (without ``models/``)."""
    return path.split("/", 2)[-1].split(":")[0].removeprefix("models/")


def _json(value: Any) -> web.Response:
    return web.Response(body=orjson.dumps(value), content_type="application/json")


def _last_text(body: Any) -> str:
    if not isinstance(body, dict):
        return ""
    contents = body.get("contents") or body.get("generateContentRequest", {}).get("contents")
    texts = [
        part.get("text", "")
        for content in contents or []
        for part in content.get("parts", [])
        if isinstance(part, dict)
    ]
    return texts[-1] if texts else ""


def _generate_response(text: str, model: str, *, final: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {
        "content": {"parts": [{"text": text}], "role": "model"},
        "index": 0,
    }
    usage: dict[str, Any] = {"promptTokenCount": 8, "totalTokenCount": 8}
    if final:
        candidate["finishReason"] = "STOP"
        usage = {"promptTokenCount": 8, "candidatesTokenCount": 5, "totalTokenCount": 13}
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": "fake-response",
    }


def _scripted(
    parts: list[dict[str, Any]], behaviour: _Behaviour, model: str, *, final: bool = True
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    answer: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
    if final:
        candidate["finishReason"] = behaviour.finish_reason
        answer["usageMetadata"] = behaviour.usage or {
            "promptTokenCount": 8,
            "candidatesTokenCount": 5,
            "totalTokenCount": 13,
        }
    return answer


def _with_logprobs(answer: dict[str, Any], model: str, by_model: dict[str, float] | None) -> None:
    if by_model is None:
        return
    value = by_model.get(model, by_model.get("*"))
    if value is not None:
        answer["candidates"][0]["avgLogprobs"] = value


def _signed(answer: dict[str, Any], signature: str | None) -> dict[str, Any]:
    if signature is not None:
        answer["candidates"][0]["content"]["parts"][0]["thoughtSignature"] = signature
    return answer


def _model(name: str) -> dict[str, Any]:
    return {
        "name": f"models/{name}",
        "baseModelId": name,
        "version": "001",
        "displayName": name,
        "inputTokenLimit": 1048576,
        "outputTokenLimit": 65536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
    }


if __name__ == "__main__":  # pragma: no cover - a standalone upstream for manual tries and bench
    import argparse
    import time

    parser = argparse.ArgumentParser(description="Run the fake Gemini API on loopback.")
    parser.add_argument("--port", type=int, default=8181)
    parser.add_argument("--delay", type=float, default=0.0, help="fixed latency in seconds")
    parser.add_argument(
        "--stream-events",
        type=int,
        default=None,
        help="events per streamed answer, one short piece of text each (default: the usual "
        "three-event answer)",
    )
    args = parser.parse_args()
    if args.stream_events is not None and args.stream_events < 1:
        parser.error("--stream-events must be at least 1")
    fake = FakeGemini(port=args.port, record=False).start()
    fake.delay(args.delay)
    if args.stream_events is not None:
        fake.stream([f" piece{number}" for number in range(args.stream_events)])
    print(f"fake Gemini API on {fake.base_url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)
