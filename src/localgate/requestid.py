"""Gives every request an id and every response an ``x-request-id`` header."""

from __future__ import annotations

import os

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["RequestIdMiddleware"]


class RequestIdMiddleware:
    """Outermost layer: the id is in ``scope['state']`` before any other code runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = os.urandom(16).hex()
        scope.setdefault("state", {})["request_id"] = request_id
        header = (b"x-request-id", request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        await self.app(scope, receive, send_with_id)
