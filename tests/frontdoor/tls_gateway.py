"""A gateway serving HTTPS on loopback for the TLS tests, with its ``ServerTls`` at hand."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from localgate.app import create_app, server_options
from localgate.config import Settings, load_settings
from localgate.frontdoor.tls import ServerTls, tls_server_options
from localgate.identity import SqliteKeyStore
from tests.conftest import (
    INFRASTRUCTURE_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    UPSTREAM_KEY,
    wait_until,
    with_test_timeouts,
)

__all__ = ["TlsGateway", "open_tls", "raw_get", "run_tls_gateway"]


@dataclass
class TlsGateway:
    """An HTTPS gateway: its port, settings, TLS object and one key per tenant asked for."""

    port: int
    settings: Settings
    tls: ServerTls
    keys: dict[str, str]

    @property
    def base_url(self) -> str:
        """The gateway's https:// URL."""
        return f"https://127.0.0.1:{self.port}"


@contextmanager
def run_tls_gateway(
    data_dir: Path,
    upstream_url: str,
    config: str,
    *,
    tenants: tuple[str, ...] = ("acme",),
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[TlsGateway]:
    """Start a gateway with ``config`` (which sets the server's TLS files) in a thread."""
    environ = {
        "LOCALGATE_DATA_DIR": str(data_dir),
        "LOCALGATE_UPSTREAM_URL": upstream_url,
        "GEMINI_API_KEY": UPSTREAM_KEY,
    }
    config_path = data_dir.parent / f"{data_dir.name}-config.yaml"
    config_path.write_text(config)
    settings = with_test_timeouts(load_settings(config_path, environ)[0])
    store = SqliteKeyStore(settings.state_db_path)
    keys = {tenant: store.create(tenant, "tests").key.reveal() for tenant in tenants}
    store.close()
    tls = ServerTls(settings.server, clock)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, config_path, tls=tls),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            **server_options(settings),
            **tls_server_options(tls),
        )
    )
    thread = threading.Thread(target=server.run, name="localgate-tls", daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), timeout=STARTUP_TIMEOUT_S)
    if not server.started:
        raise RuntimeError("localgate did not start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield TlsGateway(port=port, settings=settings, tls=tls, keys=keys)
    finally:
        server.should_exit = True
        thread.join(timeout=INFRASTRUCTURE_TIMEOUT_S)


def raw_get(connection: ssl.SSLSocket, path: str = "/healthz") -> bytes:
    """One keep-alive GET on an open TLS connection; the response's status line."""
    connection.sendall(f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode())
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        if not chunk:
            raise ConnectionError("the gateway closed the connection")
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += connection.recv(65536)
    return head.split(b"\r\n", 1)[0]


def open_tls(port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
    """A TLS connection to the gateway on ``port``."""
    plain = socket.create_connection(("127.0.0.1", port), timeout=INFRASTRUCTURE_TIMEOUT_S)
    return context.wrap_socket(plain, server_hostname="127.0.0.1")
