"""A real gateway with audited requests of two tenants, and the admin API on its data, served
by uvicorn on loopback, with a token for every role and a clock the tests move."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from localgate.admin.operators import OperatorAdmin, Role
from localgate.adminapi.app import create_admin_app
from localgate.adminapi.link import GatewayLink
from localgate.app import create_app, server_options
from localgate.config import Settings, load_settings
from localgate.identity import SqliteKeyStore
from localgate.secret import Secret
from localgate.testing import FakeGemini
from tests.conftest import (
    INFRASTRUCTURE_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    UPSTREAM_KEY,
    RunningGateway,
    wait_until,
    with_test_timeouts,
)

PASSWORD = "correct horse battery"


@dataclass
class FakeClock:
    """Seconds since the epoch, moved by the test."""

    now: float = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class AdminApi:
    """The admin API on a gateway's data: tokens per role, a request id per tenant."""

    base_url: str
    settings: Settings
    clock: FakeClock
    tokens: dict[Role, str]
    request_ids: dict[str, str]
    key_ids: dict[str, str]
    gateway: RunningGateway
    users: dict[Role, str] = field(default_factory=dict)

    def client(self, role: Role | None = None, **kwargs: Any) -> httpx.Client:
        """A client with ``role``'s bearer token (none if None)."""
        headers = dict(kwargs.pop("headers", {}))
        if role is not None:
            headers["authorization"] = f"Bearer {self.tokens[role]}"
        kwargs.setdefault("timeout", INFRASTRUCTURE_TIMEOUT_S)
        return httpx.Client(base_url=self.base_url, headers=headers, **kwargs)

    def operators(self) -> OperatorAdmin:
        """The operator store, as the CLI opens it."""
        return OperatorAdmin(self.settings.state_db_path)


@contextmanager
def gateway_and_admin(
    data_dir: Path, upstream_url: str, clock: FakeClock, config: str = ""
) -> Iterator[tuple[RunningGateway, str]]:
    """A gateway and its admin API on free loopback ports, on one event loop in a thread,
    the admin API linked to the gateway, as ``localgate serve`` runs them (``config``: more
    of the configuration file)."""
    environ = {
        "LOCALGATE_DATA_DIR": str(data_dir),
        "LOCALGATE_UPSTREAM_URL": upstream_url,
        "GEMINI_API_KEY": UPSTREAM_KEY,
    }
    config_path = data_dir.parent / f"{data_dir.name}-config.yaml"
    config_path.write_text("logging:\n  level: warning\n" + config)
    settings = with_test_timeouts(load_settings(config_path, environ)[0])
    store = SqliteKeyStore(settings.state_db_path)
    issued = store.create("acme", "tests")
    store.close()
    link = GatewayLink()
    data = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, config_path, on_started=link.attach),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            **server_options(settings),
        )
    )
    admin = uvicorn.Server(
        uvicorn.Config(
            create_admin_app(settings, config_path, clock=clock, link=link),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="on",
        )
    )

    async def both() -> None:
        await asyncio.gather(data.serve(), admin.serve())

    thread = threading.Thread(target=asyncio.run, args=(both(),), name="servers", daemon=True)
    thread.start()
    wait_until(
        lambda: (data.started and admin.started) or not thread.is_alive(),
        timeout=STARTUP_TIMEOUT_S,
    )
    if not (data.started and admin.started):
        raise RuntimeError("the gateway or its admin API did not start")
    port = data.servers[0].sockets[0].getsockname()[1]
    admin_port = admin.servers[0].sockets[0].getsockname()[1]
    try:
        yield (
            RunningGateway(
                base_url=f"http://127.0.0.1:{port}",
                settings=settings,
                key=issued.key.reveal(),
                key_id=issued.key_id,
            ),
            f"http://127.0.0.1:{admin_port}",
        )
    finally:
        data.should_exit = admin.should_exit = True
        thread.join(timeout=INFRASTRUCTURE_TIMEOUT_S)


def audited_requests(gateway: RunningGateway) -> tuple[dict[str, str], dict[str, str]]:
    """One request each of tenants acme (the gateway's key) and globex (a key made now),
    answered and on the audit trail; their request ids and key ids by tenant."""
    keys = gateway.keys()
    globex = keys.create("globex", "tests")
    keys.close()
    request_ids = {}
    for tenant, key in (("acme", gateway.key), ("globex", globex.key.reveal())):
        with gateway.client(headers={"x-goog-api-key": key}) as client:
            answer = client.post(
                "/v1beta/models/gemini-2.5-flash:generateContent",
                json={"contents": [{"parts": [{"text": f"Hello from {tenant}"}]}]},
            )
        assert answer.status_code == 200, answer.text
        request_ids[tenant] = answer.headers["x-request-id"]
        gateway.audit_headers(request_ids[tenant])
    return request_ids, {"acme": gateway.key_id, "globex": globex.key_id}


@pytest.fixture(scope="module")
def admin_api(
    fake_upstream: FakeGemini, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AdminApi]:
    """Requests of tenants acme and globex audited by a real gateway, and the admin API."""
    fake_upstream.reset()
    clock = FakeClock()
    servers = gateway_and_admin(tmp_path_factory.mktemp("admin"), fake_upstream.base_url, clock)
    with servers as (gateway, base_url):
        settings = gateway.settings
        request_ids, key_ids = audited_requests(gateway)
        with OperatorAdmin(settings.state_db_path) as operators:
            tokens = {
                role: operators.create_token(
                    role, "acme" if role is Role.TENANT_ADMIN else None
                ).token.reveal()
                for role in Role
            }
            for role in Role:
                operators.create_user(
                    f"user-{role.value}",
                    role,
                    Secret(PASSWORD),
                    "acme" if role is Role.TENANT_ADMIN else None,
                )
        yield AdminApi(
            base_url=base_url,
            settings=settings,
            clock=clock,
            tokens=tokens,
            request_ids=request_ids,
            key_ids=key_ids,
            gateway=gateway,
            users={role: f"user-{role.value}" for role in Role},
        )
