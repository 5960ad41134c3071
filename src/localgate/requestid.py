"""Gives every request an id and every response an ``x-request-id`` header."""

from __future__ import annotations

import os
import random

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["RequestIdMiddleware", "new_request_id"]

# Ids must be unique, not secret (they are shown to clients and written to logs): 128
# bits from a generator seeded from the OS once per process (again in a forked child,
# which would otherwise repeat its parent's ids), with no system call per request as
# os.urandom would make.
_ids = random.Random(os.urandom(32))  # noqa: S311 - unique ids, not secrets
os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(32)))


def new_request_id() -> str:
    """32 hex digits, unique across processes and restarts."""
    return f"{_ids.getrandbits(128):032x}"


class RequestIdMiddleware:
    """Outermost layer: the id is in ``scope['state']`` before any other code runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        header = (b"x-request-id", request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        await self.app(scope, receive, send_with_id)
