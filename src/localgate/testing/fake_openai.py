"""A real HTTP server on loopback standing in for an OpenAI-compatible model server.

It serves what vLLM and Ollama serve under ``/v1``: ``POST /chat/completions`` (whole, or
streamed as Server-Sent Events ending in ``data: [DONE]``), ``POST /embeddings`` and ``GET
/models``. By default a chat answer echoes the last user message (``echo: …``); a test
can script the next answers (text, tool calls, a finish reason), make it fail with a
status, answer a body that is not JSON, or break a stream off. Every request is recorded.

    with FakeOpenAI() as fake:
        ... configure an upstream with kind: openai and base_url: fake.base_url ...
        fake.requests[-1].body["messages"]
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from localgate.testing.fake_gemini import RecordedRequest
from localgate.testing.loopback import LoopbackServer

__all__ = ["FakeOpenAI", "ScriptedAnswer"]


@dataclass(frozen=True, slots=True)
class ScriptedAnswer:
    """One answer the fake gives instead of the echo: text and/or tool calls
    (``(name, arguments JSON)``, ids ``srv-{n}``), with a finish reason."""

    text: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()
    finish_reason: str | None = None


@dataclass(slots=True)
class _Behaviour:
    error: tuple[int, bytes, dict[str, str]] | None = None
    error_times: int | None = None
    malformed: bool = False
    stream_cut_after: int | None = None  # close the stream after this many chunks
    stream_error_after: int | None = None  # send an error event after this many chunks
    chunk_chars: int = 4
    script: list[ScriptedAnswer] = field(default_factory=list)
    models: tuple[str, ...] = ("qwen2.5-7b-instruct", "nomic-embed-text")
    usage: dict[str, Any] | None = None


class FakeOpenAI(LoopbackServer):
    """The fake OpenAI-compatible server; use as a context manager."""

    thread_name = "fake-openai"

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.requests: list[RecordedRequest] = []
        self._behaviour = _Behaviour()
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """The URL an OpenAI client takes as its base_url (ends in ``/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    # -- behaviour ----------------------------------------------------------------------

    def reset(self) -> None:
        """Forget requests and scripts; answer well again."""
        with self._lock:
            self.requests.clear()
            self._behaviour = _Behaviour()

    def fail_with(
        self,
        status: int,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        times: int | None = None,
    ) -> None:
        """Answer every request (or the next ``times``) with ``status`` and ``body``."""
        raw = body.encode() if isinstance(body, str) else orjson.dumps(body)
        with self._lock:
            self._behaviour.error = (status, raw, headers or {})
            self._behaviour.error_times = times

    def answer_malformed(self) -> None:
        """Answer 200 with a body that is not JSON."""
        with self._lock:
            self._behaviour.malformed = True

    def cut_streams_after(self, chunks: int) -> None:
        """Close streams after this many chunks, without ``[DONE]``."""
        with self._lock:
            self._behaviour.stream_cut_after = chunks

    def error_streams_after(self, chunks: int) -> None:
        """Send an error event (as vLLM does) after this many chunks."""
        with self._lock:
            self._behaviour.stream_error_after = chunks

    def script(self, *answers: ScriptedAnswer) -> None:
        """Give these answers to the next chat requests, in order; then echo again."""
        with self._lock:
            self._behaviour.script.extend(answers)

    def serve_models(self, *names: str) -> None:
        """What ``GET /models`` lists."""
        with self._lock:
            self._behaviour.models = names

    def report_usage(self, usage: dict[str, Any] | None) -> None:
        """The ``usage`` object answers carry (None: one counted from the texts)."""
        with self._lock:
            self._behaviour.usage = usage

    # -- server -------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body: Any = orjson.loads(raw) if raw else {}
        with self._lock:
            self.requests.append(
                RecordedRequest(
                    method=request.method,
                    path=request.path,
                    query=tuple(request.query.items()),
                    headers={k.lower(): v for k, v in request.headers.items()},
                    body=body,
                )
            )
            behaviour = self._behaviour
            error = behaviour.error
            if behaviour.error_times is not None:
                behaviour.error_times -= 1
                if behaviour.error_times <= 0:
                    behaviour.error, behaviour.error_times = None, None
            scripted = (
                behaviour.script.pop(0)
                if request.path.endswith("/chat/completions") and behaviour.script and not error
                else None
            )
        if error is not None:
            status, payload, headers = error
            return web.Response(
                status=status, body=payload, headers=headers, content_type="application/json"
            )
        if behaviour.malformed:
            return web.Response(body=b"<html>not json", content_type="application/json")
        if request.method == "GET" and request.path == "/v1/models":
            return _json(
                {
                    "object": "list",
                    "data": [
                        {"id": m, "object": "model", "owned_by": "me"} for m in behaviour.models
                    ],
                }
            )
        if request.method == "POST" and request.path == "/v1/embeddings":
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            return _json(
                {
                    "object": "list",
                    "model": body["model"],
                    "data": [
                        {"object": "embedding", "index": n, "embedding": _vector(text)}
                        for n, text in enumerate(inputs)
                    ],
                    "usage": {"prompt_tokens": 3, "total_tokens": 3},
                }
            )
        if request.method == "POST" and request.path == "/v1/chat/completions":
            answer = scripted or ScriptedAnswer(text=f"echo: {_last_user_text(body)}")
            if body.get("stream"):
                return await self._stream(request, body, answer, behaviour)
            return _json(_completion(body, answer, behaviour.usage))
        return _json({"error": {"message": "not found", "type": "invalid_request_error"}}, 404)

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        answer: ScriptedAnswer,
        behaviour: _Behaviour,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": body["model"]}
        chunks: list[dict[str, Any]] = [{"index": 0, "delta": {"role": "assistant"}}]
        text = answer.text or ""
        size = behaviour.chunk_chars
        chunks += [
            {"index": 0, "delta": {"content": text[i : i + size]}}
            for i in range(0, len(text), size)
        ]
        for n, (name, arguments) in enumerate(answer.tool_calls):
            half = len(arguments) // 2
            chunks.append(
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": n,
                                "id": f"srv-{n}",
                                "type": "function",
                                "function": {"name": name, "arguments": arguments[:half]},
                            }
                        ]
                    },
                }
            )
            chunks.append(
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [{"index": n, "function": {"arguments": arguments[half:]}}]
                    },
                }
            )
        reason = answer.finish_reason or ("tool_calls" if answer.tool_calls else "stop")
        chunks.append({"index": 0, "delta": {}, "finish_reason": reason})
        for sent, choice in enumerate(chunks):
            if behaviour.stream_cut_after is not None and sent >= behaviour.stream_cut_after:
                transport = request.transport
                if transport is not None:
                    transport.close()
                return response
            if behaviour.stream_error_after is not None and sent >= behaviour.stream_error_after:
                error = {
                    "error": {
                        "message": "the engine died",
                        "type": "InternalServerError",
                        "code": 500,
                    }
                }
                await response.write(b"data: " + orjson.dumps(error) + b"\n\n")
                return response
            await response.write(b"data: " + orjson.dumps({**base, "choices": [choice]}) + b"\n\n")
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = behaviour.usage or _usage(body, text)
            await response.write(
                b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n"
            )
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _completion(
    body: dict[str, Any], answer: ScriptedAnswer, usage: dict[str, Any] | None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text}
    if answer.tool_calls:
        message["tool_calls"] = [
            {"id": f"srv-{n}", "type": "function", "function": {"name": name, "arguments": args}}
            for n, (name, args) in enumerate(answer.tool_calls)
        ]
    reason = answer.finish_reason or ("tool_calls" if answer.tool_calls else "stop")
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1700000000,
        "model": body["model"],
        "choices": [
            {"index": n, "message": message, "finish_reason": reason}
            for n in range(int(body.get("n") or 1))
        ],
        "usage": usage or _usage(body, answer.text or ""),
    }


def _usage(body: dict[str, Any], text: str) -> dict[str, int]:
    prompt = len(orjson.dumps(body.get("messages"))) // 4
    completion = (len(text) + 3) // 4
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") in ("user", "tool"):
            content = message.get("content")
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content)
    return ""


def _vector(text: str) -> list[float]:
    return [float(len(text)), float(sum(map(ord, text)) % 97), 1.0]


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(value), content_type="application/json")
