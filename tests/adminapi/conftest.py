"""A real gateway with audited requests of two tenants, and the admin API on its data, served
by uvicorn on loopback, with a token for every role and a clock the tests move."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn

from localgate.admin.operators import OperatorAdmin, Role
from localgate.adminapi.app import create_admin_app
from localgate.config import Settings
from localgate.secret import Secret
from localgate.testing import FakeGemini
from tests.conftest import (
    INFRASTRUCTURE_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    RunningGateway,
    run_gateway,
    wait_until,
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


def serve_admin(settings: Settings, clock: FakeClock) -> Iterator[str]:
    """The admin API for ``settings`` on a free loopback port; its base URL."""
    server = uvicorn.Server(
        uvicorn.Config(
            create_admin_app(settings, clock=clock),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="on",
        )
    )
    thread = threading.Thread(target=server.run, name="admin-api", daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), timeout=STARTUP_TIMEOUT_S)
    if not server.started:
        raise RuntimeError("the admin API did not start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=INFRASTRUCTURE_TIMEOUT_S)


@pytest.fixture(scope="module")
def admin_api(
    fake_upstream: FakeGemini, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AdminApi]:
    """Requests of tenants acme and globex audited by a real gateway, and the admin API."""
    fake_upstream.reset()
    with run_gateway(tmp_path_factory.mktemp("admin"), fake_upstream.base_url) as gateway:
        settings = gateway.settings
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
        clock = FakeClock()
        for base_url in serve_admin(settings, clock):
            yield AdminApi(
                base_url=base_url,
                settings=settings,
                clock=clock,
                tokens=tokens,
                request_ids=request_ids,
                key_ids={"acme": gateway.key_id, "globex": globex.key_id},
                gateway=gateway,
                users={role: f"user-{role.value}" for role in Role},
            )
