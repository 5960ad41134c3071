"""Shared fixtures: the fake Gemini API and a real localgate server on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from localgate.app import create_app, server_options
from localgate.audit.database import SqliteDatabase
from localgate.audit.records import parse_header
from localgate.audit.store import AuditReader
from localgate.config import Settings, load_settings
from localgate.identity import SqliteKeyStore
from localgate.testing import FakeGemini

UPSTREAM_KEY = "upstream-secret-AIzaFAKE"
# The limit on anything a test waits for that is not itself under test: a server starting,
# a store answering, a record being written, a poll's deadline. On a loaded machine (CI
# runners, a second suite beside this one) a few seconds can pass for nothing at all, so
# the limit is far above what any of these takes; it only decides how long a broken test
# takes to fail. Tests of a timeout itself configure a short one against something that
# never answers (a hanging fake upstream, a socket that is never read).
INFRASTRUCTURE_TIMEOUT_S = 60.0
# Starting a server can take longer still: a gateway configured with a sentence-transformers
# model imports torch and loads the model in its lifespan (~25 s on a busy 2-CPU machine,
# over 60 s with a CPU stress test beside it).
STARTUP_TIMEOUT_S = 180.0


def wait_until(predicate: Callable[[], bool], timeout: float = INFRASTRUCTURE_TIMEOUT_S) -> None:
    """Poll ``predicate`` until it holds or the deadline passes."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.01)


def with_test_timeouts(settings: Settings) -> Settings:
    """``settings`` with ``INFRASTRUCTURE_TIMEOUT_S`` for the vector store's budget and the
    upstream's connect timeout, unless the test's configuration sets them itself.

    The store's default budget (2 s) covers starting its child process on the first call;
    under load that takes longer, the store is marked down and the test's answers are
    never stored.
    """
    cache, upstream = settings.cache, settings.upstream
    if "timeout_s" not in cache.model_fields_set:
        cache = cache.model_copy(update={"timeout_s": INFRASTRUCTURE_TIMEOUT_S})
    if "connect_timeout_s" not in upstream.model_fields_set:
        upstream = upstream.model_copy(update={"connect_timeout_s": INFRASTRUCTURE_TIMEOUT_S})
    return settings.model_copy(update={"cache": cache, "upstream": upstream})


@dataclass
class RunningGateway:
    """A localgate server started for a test, with one tenant key."""

    base_url: str
    settings: Settings
    key: str
    key_id: str

    def client(self, **kwargs: Any) -> httpx.Client:
        """A raw HTTP client for the gateway."""
        kwargs.setdefault("timeout", INFRASTRUCTURE_TIMEOUT_S)
        return httpx.Client(base_url=self.base_url, **kwargs)

    def access_records(self) -> list[dict[str, Any]]:
        """Access-log lines written so far."""
        path = self.settings.access_log_path
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def access_record(self, request_id: str) -> dict[str, Any]:
        """The access-log line of one request, once it has been written."""
        found: list[dict[str, Any]] = []

        def written() -> bool:
            found[:] = [r for r in self.access_records() if r["request_id"] == request_id]
            return bool(found)

        wait_until(written)
        return found[0]

    def generate(
        self, body: dict[str, Any], model: str = "gemini-2.5-flash", **headers: str
    ) -> httpx.Response:
        """POST ``body`` to generateContent with this gateway's key and ``headers``."""
        with self.client(headers={"x-goog-api-key": self.key, **headers}) as client:
            return client.post(f"/v1beta/models/{model}:generateContent", json=body)

    def audit_headers(self, request_id: str, count: int = 2) -> list[dict[str, Any]]:
        """The audit records' headers of one request, once ``count`` have been written."""
        found: list[dict[str, Any]] = []

        def written() -> bool:
            reader = AuditReader(SqliteDatabase(self.settings.audit_db_path))
            try:
                rows = reader.by_request(request_id)
                found[:] = [parse_header(row.header or b"{}") for row in rows]
            finally:
                reader.close()
            return len(found) >= count

        wait_until(written)
        return found

    def keys(self) -> SqliteKeyStore:
        """A separate connection to the gateway's key store, as the CLI would open."""
        return SqliteKeyStore(self.settings.state_db_path)


@contextmanager
def run_gateway(
    data_dir: Path,
    upstream_url: str,
    *,
    upstream_key: str | None = UPSTREAM_KEY,
    config: str = "",
) -> Iterator[RunningGateway]:
    """Start localgate with uvicorn in a thread on a free port; stop it afterwards."""
    environ = {"LOCALGATE_DATA_DIR": str(data_dir), "LOCALGATE_UPSTREAM_URL": upstream_url}
    if upstream_key is not None:
        environ["GEMINI_API_KEY"] = upstream_key
    config_path = None
    if config:
        config_path = data_dir.parent / f"{data_dir.name}-config.yaml"
        config_path.write_text(config)
    settings = with_test_timeouts(load_settings(config_path, environ)[0])
    store = SqliteKeyStore(settings.state_db_path)
    issued = store.create("acme", "tests")
    store.close()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            **server_options(settings),
        )
    )
    thread = threading.Thread(target=server.run, name="localgate", daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), timeout=STARTUP_TIMEOUT_S)
    if not server.started:
        raise RuntimeError("localgate did not start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield RunningGateway(
            base_url=f"http://127.0.0.1:{port}",
            settings=settings,
            key=issued.key.reveal(),
            key_id=issued.key_id,
        )
    finally:
        server.should_exit = True
        thread.join(timeout=INFRASTRUCTURE_TIMEOUT_S)


@pytest.fixture(scope="session")
def fake_upstream() -> Iterator[FakeGemini]:
    """One fake Gemini API for the whole run."""
    with FakeGemini() as fake:
        yield fake


@pytest.fixture
def upstream(fake_upstream: FakeGemini) -> FakeGemini:
    """The fake Gemini API, reset to good behaviour for this test."""
    fake_upstream.reset()
    return fake_upstream


@pytest.fixture(scope="session")
def shared_gateway(
    fake_upstream: FakeGemini, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    """A gateway with default settings, shared by the tests that need nothing special.

    Its circuit breaker is off: the tests take turns on it in random order, and a run of
    tests that make the upstream fail (ten calls in the breaker's window, half failed)
    would open it for the tests after them. The breaker's own tests start gateways of
    their own (tests/e2e/test_routing.py).
    """
    with run_gateway(
        tmp_path_factory.mktemp("gateway"),
        fake_upstream.base_url,
        config="circuit_breaker:\n  enabled: false\n",
    ) as gateway:
        yield gateway


@pytest.fixture
def gateway(shared_gateway: RunningGateway, upstream: FakeGemini) -> RunningGateway:
    """The shared gateway, with a freshly reset upstream."""
    return shared_gateway


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Chroma server (the ``chroma`` command of the chromadb package) on loopback."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = Path(sys.executable).parent / "chroma"
    path = tmp_path_factory.mktemp("chroma-server")
    process = subprocess.Popen(  # noqa: S603 - our own venv's chroma command
        [str(command), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if process.poll() is not None:
            raise RuntimeError("the Chroma server exited")
        try:
            return httpx.get(f"{url}/api/v2/heartbeat", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, timeout=STARTUP_TIMEOUT_S)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)
