"""Putting the original values back into the answer the client receives.

Restored: the text of every candidate part (thought summaries included) and every
string inside ``functionCall.args``. Each response or stream event is restored as
parsed JSON and re-serialised, never patched as bytes, so a value with quotes or
backslashes stays valid JSON.

Optionally (``scan_answers``), personal data in the answer that did not come from the
request is masked. In a stream, text after the last word boundary is held back (at
most ``_SCAN_HOLD`` characters) so that an identifier or a name split across events
is seen whole.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from localgate.redaction.placeholders import Pseudonyms, TextRestorer

__all__ = ["AnswerScanner", "StreamAnswerRestorer", "restore_answer"]

_CALL_KEYS = ("functionCall", "function_call")
# Where an answer can be cut for scanning without cutting an identifier or a name.
_BOUNDARY = re.compile(r"[\s，。！？；、,;!?]")
_SCAN_HOLD = 96
_SCAN_CONTEXT = 32


class AnswerScanner(Protocol):
    """Masks personal data in answer text that the request did not contain."""

    def mask_new_values(self, text: str, context: str = "") -> str:
        """``text`` with new personal data masked; ``context`` is read, not returned."""
        ...


def restore_answer(
    answer: Any, pseudonyms: Pseudonyms, scanner: AnswerScanner | None = None
) -> Any:
    """A whole (unary) answer with every issued placeholder replaced."""
    if not isinstance(answer, dict) or (not len(pseudonyms) and scanner is None):
        return answer
    for part in _parts(answer):
        text = part.get("text")
        if isinstance(text, str):
            text = pseudonyms.restore(text)
            part["text"] = scanner.mask_new_values(text) if scanner else text
        if "functionCall" in part or "function_call" in part:
            _restore_calls(part, pseudonyms, scanner)
    return answer


class _TextStream:
    """One candidate's text: placeholders restored, then (optionally) scanned."""

    def __init__(self, pseudonyms: Pseudonyms, scanner: AnswerScanner | None) -> None:
        self.restorer = TextRestorer(pseudonyms)
        self.scanner = scanner
        self.held = ""
        self.sent_tail = ""

    def feed(self, piece: str) -> str:
        restored = self.restorer.feed(piece)
        if self.scanner is None:
            return restored
        text = self.held + restored
        cut = _last_boundary(text)
        if len(text) - cut > _SCAN_HOLD:
            cut = len(text)
        ready, self.held = text[:cut], text[cut:]
        return self._scan(ready)

    def flush(self) -> tuple[str, bool]:
        """Everything still held, and whether part of it was an unfinished placeholder."""
        dangling = self.restorer.holding
        text = self.held + self.restorer.flush()
        self.held = ""
        return (self._scan(text) if self.scanner else text), dangling

    @property
    def holding(self) -> bool:
        return self.restorer.holding or bool(self.held)

    def _scan(self, text: str) -> str:
        if not text or self.scanner is None:
            return text
        masked = self.scanner.mask_new_values(text, self.sent_tail)
        self.sent_tail = (self.sent_tail + masked)[-_SCAN_CONTEXT:]
        return masked


def _last_boundary(text: str) -> int:
    """Index just after the last boundary character, or 0."""
    for index in range(len(text) - 1, -1, -1):
        if _BOUNDARY.match(text, index):
            return index + 1
    return 0


class StreamAnswerRestorer:
    """Restores a stream event by event, holding back only what it must."""

    def __init__(self, pseudonyms: Pseudonyms, scanner: AnswerScanner | None = None) -> None:
        self._pseudonyms = pseudonyms
        self._scanner = scanner
        self._texts: dict[tuple[int, bool], _TextStream] = {}
        self.dangling = 0

    def event(self, event: Any) -> Any:
        """One event, restored; text that may be half a placeholder waits for the next."""
        if not isinstance(event, dict) or (not len(self._pseudonyms) and self._scanner is None):
            return event
        for position, candidate in enumerate(event.get("candidates") or ()):
            if not isinstance(candidate, dict):
                continue
            index = candidate.get("index", position)
            if not isinstance(index, int):
                # An upstream's odd index (null, "0") is the candidate's position, as the
                # quality signals read it; compiled, a non-int would fail the typed calls.
                index = position
            last_text: dict[bool, dict[str, Any]] = {}
            for part in _candidate_parts(candidate):
                text = part.get("text")
                if isinstance(text, str):
                    thought = bool(part.get("thought"))
                    part["text"] = self._stream(index, thought).feed(text)
                    last_text[thought] = part
                if "functionCall" in part or "function_call" in part:
                    _restore_calls(part, self._pseudonyms, self._scanner)
            if candidate.get("finishReason"):
                self._flush_into(candidate, index, last_text)
        return event

    def finish(self) -> list[dict[str, Any]]:
        """Events carrying text still held when the stream ended (normally none)."""
        leftovers: dict[int, list[dict[str, Any]]] = {}
        for (index, thought), stream in self._texts.items():
            if stream.holding:
                text, dangling = stream.flush()
                self.dangling += dangling
                part: dict[str, Any] = {"text": text}
                if thought:
                    part["thought"] = True
                leftovers.setdefault(index, []).append(part)
        return [
            {"candidates": [{"content": {"parts": parts, "role": "model"}, "index": index}]}
            for index, parts in sorted(leftovers.items())
        ]

    def _stream(self, index: int, thought: bool) -> _TextStream:
        key = (index, thought)
        stream = self._texts.get(key)
        if stream is None:
            stream = self._texts[key] = _TextStream(self._pseudonyms, self._scanner)
        return stream

    def _flush_into(
        self, candidate: dict[str, Any], index: int, last_text: dict[bool, dict[str, Any]]
    ) -> None:
        for thought in (True, False):
            stream = self._texts.get((index, thought))
            if stream is None or not stream.holding:
                continue
            held, dangling = stream.flush()
            self.dangling += dangling
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


def _parts(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        part
        for candidate in answer.get("candidates") or []
        if isinstance(candidate, dict)
        for part in _candidate_parts(candidate)
    ]


def _restore_calls(
    part: dict[str, Any], pseudonyms: Pseudonyms, scanner: AnswerScanner | None
) -> None:
    for key in _CALL_KEYS:
        call = part.get(key)
        if isinstance(call, dict) and "args" in call:
            call["args"] = _restore_strings(call["args"], pseudonyms, scanner)


def _restore_strings(value: Any, pseudonyms: Pseudonyms, scanner: AnswerScanner | None) -> Any:
    if isinstance(value, str):
        restored = pseudonyms.restore(value)
        return scanner.mask_new_values(restored) if scanner else restored
    if isinstance(value, dict):
        return {
            pseudonyms.restore(key): _restore_strings(item, pseudonyms, scanner)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_restore_strings(item, pseudonyms, scanner) for item in value]
    return value
