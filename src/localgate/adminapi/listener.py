"""The admin API's listener: a second uvicorn server beside the data plane's, in the same
process and on the same event loop, on ``admin.host``/``admin.port`` only.

The data plane's server owns the signals; when it stops, so does this one. Its socket is
bound before either starts, so a port in use is known at once: fatal when the port was
asked for (``--admin-port`` or ``admin.port``), a warning when it is only the default,
so that a second gateway on one host still serves requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from localgate.adminapi.app import create_admin_app
from localgate.adminapi.link import GatewayLink
from localgate.adminapi.oidc import OidcLogin
from localgate.config import Settings
from localgate.errors import LocalgateError

__all__ = [
    "AdminListener",
    "AdminListenerError",
    "GatewayLink",
    "admin_listener",
    "run_beside",
]

logger = logging.getLogger("localgate.adminapi")


class AdminListenerError(Exception):
    """The admin listener cannot start; the message says why and which setting to change."""


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signals to the data plane's server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@dataclass
class AdminListener:
    """The admin server and the socket it will serve on."""

    server: uvicorn.Server
    socket: socket.socket
    url: str


def admin_listener(
    settings: Settings,
    source: Path | None,
    port: int | None,
    server_options: dict[str, Any],
    *,
    data_port: int,
    link: GatewayLink | None = None,
) -> AdminListener | None:
    """The admin listener ``settings`` ask for (``port`` overrides ``admin.port``; 0 or
    ``admin.enabled: false``: None); ``server_options`` are the data plane's TLS options,
    so the admin API is served over HTTPS when the gateway is; ``data_port`` is the data
    plane's, which the admin API may never share; ``link`` is filled in by the data
    plane's lifespan (``create_app(on_started=link.attach)``)."""
    admin = settings.admin
    chosen = admin.port if port is None else port
    if not admin.enabled or chosen == 0:
        return None
    if chosen == data_port:
        raise AdminListenerError(
            f"admin.port {chosen} is the data plane's port; the admin API needs its own"
        )
    try:  # a secret file that cannot be read stops the start, not the first login
        OidcLogin.from_settings(admin.oidc, time.time)
    except LocalgateError as exc:
        raise AdminListenerError(exc.message) from exc
    asked = port is not None or "port" in admin.model_fields_set
    family = socket.AF_INET6 if ":" in admin.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((admin.host, chosen))
    except OSError as exc:
        sock.close()
        message = f"the admin API cannot listen on {admin.host}:{chosen}: {exc.strerror}"
        if asked:
            raise AdminListenerError(message + " (admin.port, --admin-port)") from exc
        logger.warning("%s; it is off (set admin.port, or --admin-port)", message)
        return None
    sock.listen(128)
    sock.set_inheritable(True)
    config = uvicorn.Config(
        create_admin_app(settings, source, link=link),
        log_config=None,
        log_level=settings.logging.level,
        access_log=False,
        lifespan="on",
        ws="none",
        **server_options,
    )
    scheme = "https" if server_options else "http"
    bound = sock.getsockname()
    return AdminListener(_QuietServer(config), sock, f"{scheme}://{admin.host}:{bound[1]}")


def run_beside(
    server: uvicorn.Server,
    admin: AdminListener | None,
    *,
    sockets: list[socket.socket] | None = None,
) -> None:
    """Run ``server`` (the data plane, on ``sockets`` when a supervisor holds its port)
    and, beside it on its event loop, ``admin``; the admin server stops when the data
    plane's does."""
    if admin is None:
        server.run(sockets=sockets)
        return

    async def both() -> None:
        logger.info("admin API listening on %s", admin.url)
        task = asyncio.create_task(admin.server.serve(sockets=[admin.socket]))
        try:
            await server.serve(sockets=sockets)
        finally:
            admin.server.should_exit = True
            await task

    with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
        runner.run(both())
