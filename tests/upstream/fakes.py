"""An in-process upstream that answers, fails or streams as a test scripts it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from localgate.errors import LocalgateError
from localgate.exchange.replies import StreamReply, UnaryReply, UpstreamCall

__all__ = ["ScriptedUpstream", "answer"]


def answer(text: str, *, final: bool = True) -> dict[str, Any]:
    """A GenerateContentResponse carrying ``text`` (usage only on the final one)."""
    body: dict[str, Any] = {
        "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}}],
        "modelVersion": "scripted-1",
    }
    if final:
        body["usageMetadata"] = {"promptTokenCount": 3, "totalTokenCount": 5}
    return body


class ScriptedUpstream:
    """Records every call; refuses with ``error``, or answers ``events``.

    A stream sends ``events`` and then raises ``fail_mid_stream`` if set; with ``hold``,
    it waits for the event after the first one is taken. ``called`` is set on the first
    call, ``closed`` counts how often a stream was closed; calls are noted in ``journal``.
    """

    def __init__(
        self,
        name: str = "scripted",
        *,
        local: bool = False,
        events: list[dict[str, Any]] | None = None,
        error: LocalgateError | None = None,
        fail_mid_stream: LocalgateError | None = None,
        never_answer: bool = False,
        journal: list[str] | None = None,
    ) -> None:
        self.name = name
        self.local = local
        self.ready: str | None = None
        self.events = events if events is not None else [answer("Hello", final=False), answer("!")]
        self.error = error
        self.fail_mid_stream = fail_mid_stream
        self.never_answer = never_answer
        self.journal = journal if journal is not None else []
        self.calls: list[UpstreamCall] = []
        self.closed = 0
        self.called = asyncio.Event()
        self.hold: asyncio.Event | None = None

    async def unary(self, call: UpstreamCall) -> UnaryReply:
        """The last scripted event as a whole answer, or the scripted error."""
        await self._called(call)
        return UnaryReply(body=self.events[-1], headers={"x-upstream": self.name})

    async def stream(self, call: UpstreamCall) -> StreamReply:
        """The scripted events, once the scripted upstream "accepted" the call."""
        await self._called(call)

        async def close() -> None:
            self.closed += 1

        return StreamReply(events=self._events(), close=close, headers={"x-upstream": self.name})

    async def _called(self, call: UpstreamCall) -> None:
        self.calls.append(call)
        self.journal.append(f"upstream {self.name}")
        self.called.set()
        if self.never_answer:
            await asyncio.Event().wait()
        if self.error is not None:
            raise self.error

    async def _events(self) -> AsyncIterator[Any]:
        for index, event in enumerate(self.events):
            if index == 1 and self.hold is not None:
                await self.hold.wait()
            yield event
        if self.fail_mid_stream is not None:
            raise self.fail_mid_stream
