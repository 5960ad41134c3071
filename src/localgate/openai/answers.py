"""Gemini answers in OpenAI's shapes: a chat completion, its stream chunks, usage.

The answer translated here is the one the response stages produced: placeholders already
restored (in text and in function-call arguments), thought signatures already sealed for
the tenant. Mapping choices, documented in docs/openai.md:

- ``finishReason``: STOP is ``stop`` (``tool_calls`` when the turn calls functions),
  MAX_TOKENS ``length``, the safety family (SAFETY, RECITATION, BLOCKLIST,
  PROHIBITED_CONTENT, SPII, IMAGE_SAFETY, ...) ``content_filter``; a reason OpenAI has no
  word for (MALFORMED_FUNCTION_CALL, UNEXPECTED_TOOL_CALL, OTHER, ...) is passed on in
  lower case rather than dressed up as ``stop``. Whenever the reason is not STOP, the
  choice also carries Gemini's own in ``extra_content.google.finish_reason``.
- Tool-call ids are deterministic: the same call at the same place of an answer has the
  same id, whether streamed, unary or served from the cache.
- Thoughts (parts with ``thought: true``) are not content; their tokens are counted in
  ``completion_tokens_details.reasoning_tokens``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

__all__ = [
    "ChatChunks",
    "chat_completion",
    "finish_reason",
    "tool_call_id",
    "usage",
]

_FILTERED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)


def finish_reason(reason: Any, calls_tools: bool) -> str | None:
    """OpenAI's ``finish_reason`` for Gemini's ``finishReason`` (None while unfinished)."""
    if not isinstance(reason, str) or not reason:
        return None
    if reason == "STOP":
        return "tool_calls" if calls_tools else "stop"
    if reason == "MAX_TOKENS":
        return "length"
    if reason in _FILTERED:
        return "content_filter"
    return reason.lower()


def tool_call_id(candidate: int, ordinal: int, name: str, args: Any) -> str:
    """The id of the ``ordinal``-th function call of a candidate: the same call at the
    same place always gets the same id."""
    digest = hashlib.sha256(
        b"%d\x00%d\x00" % (candidate, ordinal)
        + name.encode("utf-8")
        + b"\x00"
        + orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
    ).hexdigest()
    return f"call_{digest[:24]}"


def usage(metadata: Any) -> dict[str, Any] | None:
    """OpenAI's ``usage`` for Gemini's ``usageMetadata``: reasoning tokens count as
    completion tokens (as OpenAI counts them), cached ones as part of the prompt."""
    if not isinstance(metadata, dict):
        return None
    prompt = _count(metadata.get("promptTokenCount")) + _count(
        metadata.get("toolUsePromptTokenCount")
    )
    thoughts = _count(metadata.get("thoughtsTokenCount"))
    completion = _count(metadata.get("candidatesTokenCount")) + thoughts
    total = _count(metadata.get("totalTokenCount")) or prompt + completion
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": total,
        "prompt_tokens_details": {"cached_tokens": _count(metadata.get("cachedContentTokenCount"))},
        "completion_tokens_details": {"reasoning_tokens": thoughts},
    }


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _google_extra(candidate: dict[str, Any]) -> dict[str, Any] | None:
    reason = candidate.get("finishReason")
    if not isinstance(reason, str) or reason == "STOP":
        return None
    extra: dict[str, Any] = {"finish_reason": reason}
    message = candidate.get("finishMessage")
    if isinstance(message, str):
        extra["finish_message"] = message
    return {"google": extra}


def _parts(candidate: Any) -> list[dict[str, Any]]:
    content = candidate.get("content") if isinstance(candidate, dict) else None
    parts = content.get("parts") if isinstance(content, dict) else None
    return [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []


def _tool_call(part: dict[str, Any], candidate: int, ordinal: int) -> dict[str, Any] | None:
    call = part.get("functionCall")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    args = call.get("args") if isinstance(call.get("args"), dict) else {}
    given = call.get("id")
    tool: dict[str, Any] = {
        "id": given
        if isinstance(given, str) and given
        else tool_call_id(candidate, ordinal, call["name"], args),
        "type": "function",
        "function": {"name": call["name"], "arguments": orjson.dumps(args).decode()},
    }
    signature = part.get("thoughtSignature")
    if isinstance(signature, str):
        tool["extra_content"] = {"google": {"thought_signature": signature}}
    return tool


def _is_text(part: dict[str, Any]) -> bool:
    return isinstance(part.get("text"), str) and not part.get("thought")


def _logprobs(candidate: dict[str, Any]) -> dict[str, Any] | None:
    result = candidate.get("logprobsResult")
    if not isinstance(result, dict):
        return None
    chosen = result.get("chosenCandidates")
    tops = result.get("topCandidates")
    content = []
    for index, token in enumerate(chosen if isinstance(chosen, list) else ()):
        entry = _token(token)
        top = tops[index] if isinstance(tops, list) and index < len(tops) else None
        alternatives = top.get("candidates") if isinstance(top, dict) else None
        entry["top_logprobs"] = [
            _token(alternative)
            for alternative in alternatives or ()
            if isinstance(alternative, dict)
        ]
        content.append(entry)
    return {"content": content, "refusal": None}


def _token(token: Any) -> dict[str, Any]:
    text = token.get("token", "") if isinstance(token, dict) else ""
    text = text if isinstance(text, str) else ""
    logprob = token.get("logProbability", 0.0) if isinstance(token, dict) else 0.0
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


def chat_completion(answer: Any, *, model: str, completion_id: str, created: int) -> dict[str, Any]:
    """The ``chat.completion`` object for a (complete) ``GenerateContentResponse``."""
    answer = answer if isinstance(answer, dict) else {}
    choices = []
    candidates = answer.get("candidates")
    for position, candidate in enumerate(candidates if isinstance(candidates, list) else ()):
        if not isinstance(candidate, dict):
            continue
        index = candidate.get("index", position)
        index = index if isinstance(index, int) else position
        parts = _parts(candidate)
        texts = [part["text"] for part in parts if _is_text(part)]
        tool_calls: list[dict[str, Any]] = []
        for part in parts:
            tool = _tool_call(part, index, len(tool_calls))
            if tool is not None:
                tool_calls.append(tool)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(texts) if texts else None,
            "refusal": None,
        }
        if tool_calls:
            message["tool_calls"] = tool_calls
        signature = _text_signature(parts)
        if signature is not None:
            message["extra_content"] = {"google": {"thought_signature": signature}}
        choice: dict[str, Any] = {
            "index": index,
            "message": message,
            "finish_reason": finish_reason(candidate.get("finishReason"), bool(tool_calls))
            or "stop",
            "logprobs": _logprobs(candidate),
        }
        extra = _google_extra(candidate)
        if extra is not None:
            choice["extra_content"] = extra
        choices.append(choice)
    if not choices:
        choices.append(_blocked_choice(answer))
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": _model(answer, model),
        "choices": choices,
        "usage": usage(answer.get("usageMetadata"))
        or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "system_fingerprint": None,
    }


def _text_signature(parts: list[dict[str, Any]]) -> str | None:
    """The signature Gemini 3 puts on a text part of an answer without function calls."""
    for part in parts:
        signature = part.get("thoughtSignature")
        if isinstance(signature, str) and "functionCall" not in part:
            return signature
    return None


def _blocked_choice(answer: dict[str, Any]) -> dict[str, Any]:
    """The one choice of an answer without candidates: the prompt itself was blocked."""
    feedback = answer.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": None, "refusal": None},
        "finish_reason": "content_filter",
        "logprobs": None,
    }
    if isinstance(reason, str):
        choice["extra_content"] = {"google": {"block_reason": reason}}
    return choice


def _model(answer: dict[str, Any], requested: str) -> str:
    version = answer.get("modelVersion")
    return version if isinstance(version, str) and version else requested


class ChatChunks:
    """Turns a stream's Gemini events into ``chat.completion.chunk`` objects, one stream's
    worth of state: which choices have had their role, how many calls each has made."""

    __slots__ = ("_completion_id", "_created", "_model", "_started", "_tool_counts", "usage")

    def __init__(self, *, model: str, completion_id: str, created: int) -> None:
        self._model = model
        self._completion_id = completion_id
        self._created = created
        self._started: set[int] = set()
        self._tool_counts: dict[int, int] = {}
        # The stream's usage so far (each event's usageMetadata replaces the last).
        self.usage: dict[str, Any] | None = None

    def chunks(self, event: Any) -> list[dict[str, Any]]:
        """The chunks for one event (none for an event that carries nothing)."""
        if not isinstance(event, dict):
            return []
        found = usage(event.get("usageMetadata"))
        if found is not None:
            self.usage = found
        model = event.get("modelVersion")
        if isinstance(model, str) and model:
            self._model = model
        candidates = event.get("candidates")
        choices = []
        for position, candidate in enumerate(candidates if isinstance(candidates, list) else ()):
            if isinstance(candidate, dict):
                choice = self._choice(candidate, position)
                if choice is not None:
                    choices.append(choice)
        if not choices and not candidates and "promptFeedback" in event and not self._started:
            choices.append(self._blocked(event))
        return [self.chunk(choices)] if choices else []

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """A chunk object around ``choices``."""
        return {
            "id": self._completion_id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": choices,
            "system_fingerprint": None,
            **extra,
        }

    def _choice(self, candidate: dict[str, Any], position: int) -> dict[str, Any] | None:
        index = candidate.get("index", position)
        index = index if isinstance(index, int) else position
        delta: dict[str, Any] = {}
        if index not in self._started:
            self._started.add(index)
            delta["role"] = "assistant"
        parts = _parts(candidate)
        texts = [part["text"] for part in parts if _is_text(part)]
        if texts:
            delta["content"] = "".join(texts)
        elif "role" in delta:
            delta["content"] = ""
        calls = []
        for part in parts:
            ordinal = self._tool_counts.get(index, 0)
            tool = _tool_call(part, index, ordinal)
            if tool is not None:
                self._tool_counts[index] = ordinal + 1
                calls.append({"index": ordinal, **tool})
        if calls:
            delta["tool_calls"] = calls
        signature = _text_signature(parts)
        if signature is not None:
            delta["extra_content"] = {"google": {"thought_signature": signature}}
        reason = finish_reason(candidate.get("finishReason"), index in self._tool_counts)
        if not delta and reason is None:
            return None
        choice: dict[str, Any] = {
            "index": index,
            "delta": delta,
            "finish_reason": reason,
            "logprobs": _logprobs(candidate),
        }
        extra = _google_extra(candidate)
        if extra is not None:
            choice["extra_content"] = extra
        return choice

    def _blocked(self, event: dict[str, Any]) -> dict[str, Any]:
        self._started.add(0)
        blocked = _blocked_choice(event)
        return {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "finish_reason": "content_filter",
            "logprobs": None,
            **({"extra_content": blocked["extra_content"]} if "extra_content" in blocked else {}),
        }
