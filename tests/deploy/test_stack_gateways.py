"""The compose stack's gateways, without Docker: its configuration file, the keys its
one-shot makes and `localgate migrate`, run as two real `localgate serve` processes on the
PostgreSQL and Redis here and a Chroma server: both ready, both answering, the second from
the cache the first filled. What only Docker adds (the image, networks, HAProxy) is
checked statically in test_compose.py and test_dockerfile.py."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest

from localgate.testing import FakeGemini
from tests.audit.conftest import postgres_schema
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, STARTUP_TIMEOUT_S, UPSTREAM_KEY, wait_until
from tests.deploy.tools import ROOT, make_keys
from tests.gateway_process import free_port
from tests.limits.conftest import GENERATE, REDIS_URL, redis_available

CONFIG = ROOT / "deploy" / "compose" / "localgate.yaml"
HI = {"contents": [{"parts": [{"text": "hello from the stack"}]}]}
# The compose services' addresses, and what stands in for each here.
IN_CONTAINERS = {
    "/etc/localgate/keys": "keys",
    "/run/secrets/gemini_api_key": "secret",
    "http://chroma:8000": "chroma",
}


@pytest.fixture
def dsn() -> Iterator[str]:
    with postgres_schema() as found:
        yield found


def stack_config(tmp_path: Path, keys: Path, chroma: str) -> Path:
    """deploy/compose/localgate.yaml with the containers' paths and hosts mapped to here."""
    secret = tmp_path / "gemini_api_key"
    secret.write_text(UPSTREAM_KEY + "\n")
    secret.chmod(0o600)
    here = {"keys": str(keys), "secret": str(secret), "chroma": chroma}
    text = CONFIG.read_text()
    for there, name in IN_CONTAINERS.items():
        assert there in text, f"{there} is no longer in {CONFIG}: update this test"
        text = text.replace(there, here[name])
    path = tmp_path / "localgate.yaml"
    path.write_text(text)
    return path


def localgate(env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - the CLI under test
        [sys.executable, "-m", "localgate", *arguments],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=INFRASTRUCTURE_TIMEOUT_S,
    )


def test_the_stack_s_configuration_keys_and_migration_give_two_ready_replicas(
    tmp_path: Path, dsn: str, chroma_server: str, upstream: FakeGemini
) -> None:
    redis_available()
    folders = make_keys(tmp_path)
    config = stack_config(tmp_path, folders["keys"], chroma_server)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LOCALGATE_", "OTEL_"))},
        "GEMINI_API_KEY": "",
        "LOCALGATE_CONFIG": str(config),
        "LOCALGATE_DATABASE_URL": dsn,
        "LOCALGATE_AUDIT_POSTGRES_DSN": dsn,
        "LOCALGATE_REDIS_URL": REDIS_URL,
        "LOCALGATE_UPSTREAM_URL": upstream.base_url,
    }
    tenant = f"stack{secrets.token_hex(5)}"

    migrated = localgate({**env, "LOCALGATE_DATA_DIR": str(tmp_path / "migrate")}, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "audit store" in migrated.stdout

    processes: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        # Both start at once, as compose starts them once the migration is done.
        for name in ("gateway-1", "gateway-2"):
            port = free_port()
            log = (tmp_path / f"{name}.log").open("ab")
            # Loopback here, whatever server.host says.
            command = [sys.executable, "-m", "localgate", "serve", "--host", "127.0.0.1"]
            processes.append(
                subprocess.Popen(  # noqa: S603 - the gateway under test
                    [*command, "--port", str(port)],
                    env={**env, "LOCALGATE_DATA_DIR": str(tmp_path / name)},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            log.close()
            urls.append(f"http://127.0.0.1:{port}")
        keys = []
        for name in ("gateway-1", "gateway-2"):
            replica_env = {**env, "LOCALGATE_DATA_DIR": str(tmp_path / name)}
            created = localgate(replica_env, "keys", "create", "--tenant", tenant, "--json")
            assert created.returncode == 0, created.stderr
            keys.append(json.loads(created.stdout)["key"])

        def all_ready() -> bool:
            for process, name in zip(processes, ("gateway-1", "gateway-2"), strict=True):
                assert process.poll() is None, (tmp_path / f"{name}.log").read_text()
            try:
                return all(httpx.get(f"{u}/readyz", timeout=5).status_code == 200 for u in urls)
            except httpx.TransportError:
                return False

        wait_until(all_ready, timeout=STARTUP_TIMEOUT_S)
        first = httpx.post(
            urls[0] + GENERATE,
            json=HI,
            headers={"x-goog-api-key": keys[0]},
            timeout=INFRASTRUCTURE_TIMEOUT_S,
        )
        assert first.status_code == 200, first.text
        assert first.headers["x-localgate-cache"] == "miss"
        # From now on the upstream refuses: what the second replica answers can only come
        # from the entry the first stored in the shared Chroma server (it learns the other
        # replicas' entries within seconds; until then it misses and gets the refusal).
        upstream.fail_with(400, {"error": {"code": 400, "message": "no", "status": "X"}})
        second: list[httpx.Response] = []

        def answered_from_the_shared_cache() -> bool:
            second[:] = [
                httpx.post(
                    urls[1] + GENERATE,
                    json=HI,
                    headers={"x-goog-api-key": keys[1]},
                    timeout=INFRASTRUCTURE_TIMEOUT_S,
                )
            ]
            return second[0].status_code == 200

        wait_until(answered_from_the_shared_cache)
        assert second[0].headers["x-localgate-cache"].startswith("hit")
        assert second[0].json()["candidates"] == first.json()["candidates"]
        # The one request that left carried the key from the stack's secret file.
        forwarded = [r for r in upstream.requests if r.path.endswith(":generateContent")]
        assert forwarded[0].headers.get("x-goog-api-key") == UPSTREAM_KEY
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        # The stack's drain_delay_s keeps them listening 5 s more; a second signal stops that.
        for process, name in zip(processes, ("gateway-1", "gateway-2"), strict=False):
            wait_until(partial(_draining, process, tmp_path / f"{name}.log"))
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)


def _draining(process: subprocess.Popen[bytes], log: Path) -> bool:
    return process.poll() is not None or "draining" in log.read_text()
