"""Putting the original values back into the answer the client receives.

Restored: the text of every candidate part (thought summaries included) and every
string inside ``functionCall.args``. Each response or stream event is restored as
parsed JSON and re-serialised, never patched as bytes, so a value with quotes or
backslashes stays valid JSON.
"""

from __future__ import annotations

from typing import Any

from localgate.redaction.placeholders import Pseudonyms, TextRestorer

__all__ = ["StreamAnswerRestorer", "restore_answer"]

_CALL_KEYS = ("functionCall", "function_call")


def restore_answer(answer: Any, pseudonyms: Pseudonyms) -> Any:
    """A whole (unary) answer with every issued placeholder replaced."""
    if not len(pseudonyms) or not isinstance(answer, dict):
        return answer
    for _, part in _parts(answer):
        if isinstance(part.get("text"), str):
            part["text"] = pseudonyms.restore(part["text"])
        _restore_calls(part, pseudonyms)
    return answer


class StreamAnswerRestorer:
    """Restores a stream event by event, holding back only unfinished placeholders."""

    def __init__(self, pseudonyms: Pseudonyms) -> None:
        self._pseudonyms = pseudonyms
        self._texts: dict[tuple[int, bool], TextRestorer] = {}
        self.dangling = 0

    def event(self, event: Any) -> Any:
        """One event, restored; text that may be half a placeholder waits for the next."""
        if not len(self._pseudonyms) or not isinstance(event, dict):
            return event
        for position, candidate in enumerate(event.get("candidates") or []):
            if not isinstance(candidate, dict):
                continue
            index = candidate.get("index", position)
            last_text: dict[bool, dict[str, Any]] = {}
            for part in _candidate_parts(candidate):
                if isinstance(part.get("text"), str):
                    thought = bool(part.get("thought"))
                    part["text"] = self._restorer(index, thought).feed(part["text"])
                    last_text[thought] = part
                _restore_calls(part, self._pseudonyms)
            if candidate.get("finishReason"):
                self._flush_into(candidate, index, last_text)
        return event

    def finish(self) -> list[dict[str, Any]]:
        """Events carrying text still held when the stream ended (normally none)."""
        leftovers: dict[int, list[dict[str, Any]]] = {}
        for (index, thought), restorer in self._texts.items():
            if restorer.holding:
                self.dangling += 1
                part: dict[str, Any] = {"text": restorer.flush()}
                if thought:
                    part["thought"] = True
                leftovers.setdefault(index, []).append(part)
        return [
            {"candidates": [{"content": {"parts": parts, "role": "model"}, "index": index}]}
            for index, parts in sorted(leftovers.items())
        ]

    def _restorer(self, index: int, thought: bool) -> TextRestorer:
        key = (index, thought)
        restorer = self._texts.get(key)
        if restorer is None:
            restorer = self._texts[key] = TextRestorer(self._pseudonyms)
        return restorer

    def _flush_into(
        self, candidate: dict[str, Any], index: int, last_text: dict[bool, dict[str, Any]]
    ) -> None:
        for thought in (True, False):
            restorer = self._texts.get((index, thought))
            if restorer is None or not restorer.holding:
                continue
            self.dangling += 1
            held = restorer.flush()
            part = last_text.get(thought)
            if part is not None:
                part["text"] += held
                continue
            content = candidate.setdefault("content", {"role": "model"})
            new_part: dict[str, Any] = {"text": held}
            if thought:
                new_part["thought"] = True
            content.setdefault("parts", []).append(new_part)


def _candidate_parts(candidate: dict[str, Any]) -> list[dict[str, Any]]:
    content = candidate.get("content")
    if not isinstance(content, dict):
        return []
    return [part for part in content.get("parts") or [] if isinstance(part, dict)]


def _parts(answer: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return [
        (position, part)
        for position, candidate in enumerate(answer.get("candidates") or [])
        if isinstance(candidate, dict)
        for part in _candidate_parts(candidate)
    ]


def _restore_calls(part: dict[str, Any], pseudonyms: Pseudonyms) -> None:
    for key in _CALL_KEYS:
        call = part.get(key)
        if isinstance(call, dict) and "args" in call:
            call["args"] = _restore_strings(call["args"], pseudonyms)


def _restore_strings(value: Any, pseudonyms: Pseudonyms) -> Any:
    if isinstance(value, str):
        return pseudonyms.restore(value)
    if isinstance(value, dict):
        return {key: _restore_strings(item, pseudonyms) for key, item in value.items()}
    if isinstance(value, list):
        return [_restore_strings(item, pseudonyms) for item in value]
    return value
