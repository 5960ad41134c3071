"""An HTTP CONNECT proxy on loopback that records the tunnels it opened.

Written here rather than taken from PyPI: the well-known proxies (proxy.py, mitmproxy) run
their own processes and plugin systems; a test only needs a tunnel and a record of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

__all__ = ["ConnectProxy"]


class ConnectProxy:
    """Tunnels ``CONNECT host:port`` requests; ``tunnels`` lists the targets it was asked for.

    With ``refuse`` it answers 403 instead of tunnelling (a proxy whose policy says no).
    """

    def __init__(self, *, refuse: bool = False) -> None:
        self.tunnels: list[str] = []
        self.authorizations: list[str | None] = []
        self.refuse = refuse
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The proxy's URL, for HTTPS_PROXY or upstream.proxy_url."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ConnectProxy:
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._client, "127.0.0.1", 0)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            started.set()
            loop.run_forever()
            self._server.close()
            # Tunnels still open are ended here, on their own loop: left pending, their
            # coroutines would be collected later, in another test, as unraisable errors.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(_settle(pending))
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=run, name="connect-proxy", daemon=True)
        self._thread.start()
        started.wait()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        self.authorizations.append(
            next((v for k, v in headers.items() if k.lower() == "proxy-authorization"), None)
        )
        if method != "CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            writer.close()
            return
        self.tunnels.append(target)
        if self.refuse:
            writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        host, _, port = target.rpartition(":")
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(
            _pipe(reader, upstream_writer), _pipe(upstream_reader, writer), return_exceptions=True
        )


async def _settle(tasks: set[asyncio.Task[object]]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError):
            writer.close()
