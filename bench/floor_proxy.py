"""The benchmark's floor: the thinnest reasonable Python pass-through proxy.

A raw ASGI app on the same server stack as localgate (uvicorn with uvloop and
httptools, one shared pooled ``aiohttp.ClientSession``). It forwards the request
body to the same path on the upstream with the upstream key, and relays the answer:
read whole for JSON, chunk by chunk for an event stream. No routing, parsing,
validation, authentication, metrics or logging: whatever localgate spends beyond
this is the price of being a gateway.

    python -m bench.floor_proxy --port 8082 --upstream http://127.0.0.1:8181
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import aiohttp

__all__ = ["FloorProxy"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_EVENT_STREAM = "text/event-stream"


class FloorProxy:
    """ASGI app forwarding every HTTP request to ``upstream_url`` with ``api_key``."""

    def __init__(self, upstream_url: str, api_key: str) -> None:
        self._upstream = upstream_url.rstrip("/")
        self._api_key = api_key
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._forward(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # The same pool settings as localgate's upstream session.
                self._session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=256, ttl_dns_cache=300),
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=600),
                    skip_auto_headers=("User-Agent",),
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._session is not None:
                    await self._session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        session = self._session
        if session is None:
            await _plain(send, 503, b"not started")
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        url = self._upstream + scope["path"]
        if scope["query_string"]:
            url += "?" + scope["query_string"].decode("latin-1")
        headers = {"content-type": "application/json", "x-goog-api-key": self._api_key}
        started = False
        try:
            async with session.request(
                scope["method"], url, data=b"".join(chunks), headers=headers
            ) as response:
                content_type = response.headers.get("content-type", "application/json")
                start = {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": [(b"content-type", content_type.encode("latin-1"))],
                }
                if not content_type.startswith(_EVENT_STREAM):
                    body = await response.read()
                    await send(start)
                    await send({"type": "http.response.body", "body": body})
                    return
                await send(start)
                started = True
                async for chunk in response.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        except aiohttp.ClientError:
            if started:
                raise  # uvicorn drops the client's connection: the answer is cut short
            await _plain(send, 502, b"upstream unreachable")


async def _plain(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    """Serve the floor proxy on loopback; the upstream key comes from ``GEMINI_API_KEY``."""
    import uvicorn

    parser = argparse.ArgumentParser(description="The benchmark's floor pass-through proxy.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="upstream base URL")
    args = parser.parse_args()
    uvicorn.run(
        FloorProxy(args.upstream, os.environ.get("GEMINI_API_KEY", "")),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
