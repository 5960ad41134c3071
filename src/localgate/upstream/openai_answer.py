"""OpenAI-compatible answers in Gemini's shape: chat completions, their stream chunks,
embeddings, the model list and error bodies.

A stream's text is passed on chunk by chunk; a tool call's arguments arrive in pieces
and are passed on whole, in one event with the choice's ``finishReason`` (Gemini streams
function calls whole). Usage arrives after the last choice has finished (``stream_options.
include_usage``), so the finishing event waits for it or for ``[DONE]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from localgate.errors import UpstreamBadResponse
from localgate.upstream.openai_request import call_id

__all__ = [
    "CANONICAL_STATUS",
    "ChunkTranslator",
    "embeddings_answer",
    "finish_reason",
    "gemini_answer",
    "usage_metadata",
]

_FINISH = {
    "stop": "STOP",
    "length": "MAX_TOKENS",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "content_filter": "SAFETY",
}
CANONICAL_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    422: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def finish_reason(reason: Any) -> str | None:
    """Gemini's ``finishReason`` for an OpenAI ``finish_reason`` (None: not finished)."""
    if reason is None:
        return None
    return _FINISH.get(str(reason), "OTHER")


def usage_metadata(usage: Any) -> dict[str, int] | None:
    """``usageMetadata`` from an OpenAI ``usage`` object (cached and reasoning tokens kept)."""
    if not isinstance(usage, dict):
        return None
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    out = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion,
        "totalTokenCount": _int(usage.get("total_tokens")) or prompt + completion,
    }
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and _int(details.get("cached_tokens")):
        out["cachedContentTokenCount"] = _int(details.get("cached_tokens"))
    details = usage.get("completion_tokens_details")
    if isinstance(details, dict) and _int(details.get("reasoning_tokens")):
        reasoning = _int(details.get("reasoning_tokens"))
        # OpenAI counts reasoning inside completion tokens; Gemini counts thoughts apart.
        out["thoughtsTokenCount"] = reasoning
        out["candidatesTokenCount"] = max(0, completion - reasoning)
    return out


def gemini_answer(answer: Any, turn: int, where: str) -> dict[str, Any]:
    """A ``chat.completion`` as a ``GenerateContentResponse``; ``turn`` is the index the
    answer will have among the conversation's contents (for tool call ids)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
        raise UpstreamBadResponse(f"{where} answered with a body that is not a chat completion.")
    candidates = []
    for position, choice in enumerate(answer["choices"]):
        if not isinstance(choice, dict):
            raise UpstreamBadResponse(f"{where} answered with a choice that is not an object.")
        message = choice.get("message")
        if not isinstance(message, dict):
            raise UpstreamBadResponse(f"{where} answered with a choice without a message.")
        index = _int(choice.get("index", position))
        parts: list[dict[str, Any]] = []
        content = message.get("content")
        if isinstance(content, str) and (content or not message.get("tool_calls")):
            parts.append({"text": content})
        reason = finish_reason(choice.get("finish_reason"))
        calls, malformed = _function_calls(message.get("tool_calls"), turn, where)
        if malformed:
            parts, reason = [], "MALFORMED_FUNCTION_CALL"
        else:
            parts.extend(calls)
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": index}
        if reason is not None:
            candidate["finishReason"] = reason
        candidates.append(candidate)
    out: dict[str, Any] = {"candidates": candidates}
    usage = usage_metadata(answer.get("usage"))
    if usage is not None:
        out["usageMetadata"] = usage
    _identify(out, answer)
    return out


def embeddings_answer(answer: Any, count: int, batch: bool, where: str) -> dict[str, Any]:
    """An ``/embeddings`` answer as Gemini's ``embedContent`` or ``batchEmbedContents``."""
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list) or len(data) != count:
        raise UpstreamBadResponse(
            f"{where} answered the embeddings request without one embedding per input."
        )
    ordered = sorted(
        data, key=lambda item: _int(item.get("index")) if isinstance(item, dict) else 0
    )
    vectors = []
    for item in ordered:
        values = item.get("embedding") if isinstance(item, dict) else None
        if not isinstance(values, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in values
        ):
            raise UpstreamBadResponse(f"{where} answered with an embedding that is not numbers.")
        vectors.append({"values": [float(v) for v in values]})
    return {"embeddings": vectors} if batch else {"embedding": vectors[0]}


@dataclass(slots=True)
class _Call:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Choice:
    calls: dict[int, _Call] = field(default_factory=dict)
    finished: str | None = None


class ChunkTranslator:
    """Turns one stream's ``chat.completion.chunk`` objects into Gemini stream events."""

    def __init__(self, turn: int, where: str) -> None:
        self._turn = turn
        self._where = where
        self._choices: dict[int, _Choice] = {}
        self._pending: list[dict[str, Any]] = []  # finishing events waiting for usage
        self._identity: dict[str, Any] = {}
        self.done = False

    def chunk(self, chunk: Any) -> list[dict[str, Any]]:
        """The events one chunk makes (often one, none for a bare role or tool piece)."""
        if not isinstance(chunk, dict):
            raise UpstreamBadResponse(f"{self._where} sent a stream chunk that is not an object.")
        if not self._identity:
            _identify(self._identity, chunk)
        events: list[dict[str, Any]] = []
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            choices = []
        for position, choice in enumerate(choices):
            if not isinstance(choice, dict):
                continue
            index = _int(choice.get("index", position))
            state = self._choices.setdefault(index, _Choice())
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            text = delta.get("content")
            for piece in delta.get("tool_calls") or ():
                self._note_call(state, piece)
            reason = finish_reason(choice.get("finish_reason"))
            if reason is None:
                if isinstance(text, str) and text:
                    events.append(self._event(index, [{"text": text}], None))
                continue
            parts: list[dict[str, Any]] = [{"text": text}] if isinstance(text, str) and text else []
            calls, malformed = _function_calls(
                [
                    {
                        "id": call.id,
                        "function": {"name": call.name, "arguments": "".join(call.arguments)},
                    }
                    for _, call in sorted(state.calls.items())
                ],
                self._turn,
                self._where,
            )
            if malformed:
                parts, reason = [], "MALFORMED_FUNCTION_CALL"
            else:
                parts.extend(calls)
            state.finished = reason
            self._pending.append(self._event(index, parts or [{"text": ""}], reason))
        usage = usage_metadata(chunk.get("usage"))
        if usage is not None:
            events.extend(self._flush(usage))
        return events

    def finish(self) -> list[dict[str, Any]]:
        """What is still held when the stream ends (``[DONE]`` or its end)."""
        return self._flush(None)

    @property
    def complete(self) -> bool:
        """Whether every choice seen has finished (a stream without ``[DONE]`` ended well)."""
        return bool(self._choices) and all(c.finished for c in self._choices.values())

    def _flush(self, usage: dict[str, int] | None) -> list[dict[str, Any]]:
        events, self._pending = self._pending, []
        if usage is not None:
            if not events:
                events = [self._event(None, [], None)]
            events[-1]["usageMetadata"] = usage
        return events

    def _note_call(self, state: _Choice, piece: Any) -> None:
        if not isinstance(piece, dict):
            return
        call = state.calls.setdefault(_int(piece.get("index", len(state.calls))), _Call())
        if isinstance(piece.get("id"), str) and piece["id"]:
            call.id = piece["id"]
        function = piece.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and function["name"]:
                call.name = function["name"]
            if isinstance(function.get("arguments"), str):
                call.arguments.append(function["arguments"])

    def _event(
        self, index: int | None, parts: list[dict[str, Any]], reason: str | None
    ) -> dict[str, Any]:
        event: dict[str, Any] = {}
        if index is not None:
            candidate: dict[str, Any] = {
                "content": {"role": "model", "parts": parts},
                "index": index,
            }
            if reason is not None:
                candidate["finishReason"] = reason
            event["candidates"] = [candidate]
        event.update(self._identity)
        return event


def _function_calls(tool_calls: Any, turn: int, where: str) -> tuple[list[dict[str, Any]], bool]:
    """Gemini ``functionCall`` parts, and whether a call's arguments were not a JSON object.

    Each call gets the id of its place in the conversation, so that the next request,
    with or without ids, pairs its results with these calls the same way.
    """
    if not tool_calls:
        return [], False
    if not isinstance(tool_calls, list):
        raise UpstreamBadResponse(f"{where} answered with tool_calls that are not a list.")
    parts = []
    for number, call in enumerate(tool_calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return [], True
        raw = function.get("arguments") or "{}"
        try:
            args = orjson.loads(raw) if isinstance(raw, str) else raw
        except orjson.JSONDecodeError:
            return [], True
        if not isinstance(args, dict):
            return [], True
        parts.append(
            {"functionCall": {"id": call_id(turn, number), "name": function["name"], "args": args}}
        )
    return parts, False


def _identify(out: dict[str, Any], answer: dict[str, Any]) -> None:
    if isinstance(answer.get("model"), str):
        out["modelVersion"] = answer["model"]
    if isinstance(answer.get("id"), str):
        out["responseId"] = answer["id"]


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
