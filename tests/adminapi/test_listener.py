"""`localgate serve` with its admin listener: a real process, two ports that never serve
each other's routes, the admin server stopping with the gateway, and the port checks."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from localgate.cli import main
from localgate.testing import FakeGemini
from tests.certificates import TestAuthority
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, STARTUP_TIMEOUT_S, wait_until
from tests.gateway_process import free_port, start


def environment(tmp_path: Path, upstream: FakeGemini) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("LOCALGATE_")},
        "LOCALGATE_DATA_DIR": str(tmp_path / "data"),
        "LOCALGATE_UPSTREAM_URL": upstream.base_url,
        "GEMINI_API_KEY": "upstream-key",
    }


def test_the_admin_api_and_the_data_plane_never_share_a_port(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    env = environment(tmp_path, upstream)
    runner = CliRunner()
    key = json.loads(
        runner.invoke(main, ["keys", "create", "--tenant", "acme", "--json"], env=env).output
    )["key"]
    created = runner.invoke(
        main, ["admin", "token", "create", "--role", "security", "--json"], env=env
    )
    token = json.loads(created.output)["token"]
    port, admin_port = free_port(), free_port()
    gateway = start(env, port, tmp_path / "gateway.log", "--admin-port", str(admin_port))
    try:
        data = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=INFRASTRUCTURE_TIMEOUT_S)
        admin = httpx.Client(
            base_url=f"http://127.0.0.1:{admin_port}",
            headers={"authorization": f"Bearer {token}"},
            timeout=INFRASTRUCTURE_TIMEOUT_S,
        )
        log = (tmp_path / "gateway.log").read_text()
        assert f"admin API listening on http://127.0.0.1:{admin_port}" in log
        with data, admin:
            # Each port serves its own routes...
            assert admin.get("/admin/api/v1/tenants").status_code == 200
            assert admin.get("/admin/api/openapi.json").json()["openapi"] == "3.1.0"
            assert data.get("/healthz").status_code == 200
            # ... and never the other's, with or without credentials.
            for path in ("/admin/api/v1/tenants", "/admin/api/openapi.json", "/admin/"):
                refused = data.get(path, headers={"authorization": f"Bearer {token}"})
                assert refused.status_code == 404, path
                assert refused.json()["error"]["code"] == 404
            for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
                assert admin.get(path).status_code == 404, path
            generate = "/v1beta/models/gemini-2.5-flash:generateContent"
            body = {"contents": [{"parts": [{"text": "hi"}]}]}
            assert (
                admin.post(generate, json=body, headers={"x-goog-api-key": key}).status_code == 404
            )
            assert (
                data.post(generate, json=body, headers={"x-goog-api-key": key}).status_code == 200
            )
    finally:
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(timeout=INFRASTRUCTURE_TIMEOUT_S) == 0
    # The admin server stopped with the gateway.
    with httpx.Client(timeout=5) as probe:
        try:
            probe.get(f"http://127.0.0.1:{admin_port}/admin/api/openapi.json")
            raise AssertionError("the admin listener outlived the gateway")
        except httpx.TransportError:
            pass


def test_admin_port_0_turns_the_listener_off(tmp_path: Path, upstream: FakeGemini) -> None:
    env = environment(tmp_path, upstream)
    port = free_port()
    gateway = start(env, port, tmp_path / "gateway.log", "--admin-port", "0")
    try:
        log = (tmp_path / "gateway.log").read_text()
        assert "admin API listening" not in log
    finally:
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(timeout=INFRASTRUCTURE_TIMEOUT_S) == 0


def serve_fails(env: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "localgate", "serve", *options]
    return subprocess.run(  # noqa: S603 - this interpreter, fixed arguments
        command, env=env, capture_output=True, text=True, timeout=INFRASTRUCTURE_TIMEOUT_S * 3
    )


def test_the_admin_port_cannot_be_the_data_planes_or_one_in_use_nor_oidc_half_set_up(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    env = environment(tmp_path, upstream)
    port = free_port()
    same = serve_fails(env, "--port", str(port), "--admin-port", str(port))
    assert same.returncode == 1
    assert "the data plane's port" in same.stderr

    config = tmp_path / "oidc.yaml"
    config.write_text(
        "admin:\n  oidc:\n    enabled: true\n    issuer: https://sso.example.com\n"
        "    client_id: lg\n    redirect_uri: https://a.example/admin/api/v1/oidc/callback\n"
        f"    client_secret_file: {tmp_path / 'missing-secret'}\n"
    )
    unreadable = serve_fails(env, "--config", str(config), "--port", str(free_port()))
    assert unreadable.returncode == 1
    assert "admin.oidc.client_secret_file" in unreadable.stderr

    busy = free_port()
    holder = start(env, busy, tmp_path / "holder.log", "--admin-port", "0")
    try:
        taken = serve_fails(env, "--port", str(free_port()), "--admin-port", str(busy))
        assert taken.returncode == 1
        assert "admin API cannot listen" in taken.stderr
    finally:
        holder.send_signal(signal.SIGTERM)
        wait_until(lambda: holder.poll() is not None)


def test_over_https_the_admin_api_is_https_too_and_its_cookie_secure(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    authority = TestAuthority(tmp_path / "ca")
    server = authority.server("admin", days=30)
    config = tmp_path / "localgate.yaml"
    config.write_text(
        f"server:\n  tls_cert_file: {server.cert_file}\n  tls_key_file: {server.key_file}\n"
    )
    env = environment(tmp_path, upstream)
    password = "a long passphrase"
    created = CliRunner().invoke(
        main,
        ["admin", "user", "create", "fay", "--role", "viewer", "--password-stdin"],
        input=password + "\n",
        env=env,
    )
    assert created.exit_code == 0, created.output
    port, admin_port = free_port(), free_port()
    command = [sys.executable, "-m", "localgate", "serve", "--config", str(config)]
    command += ["--port", str(port), "--admin-port", str(admin_port)]
    log = tmp_path / "gateway.log"
    with log.open("ab") as output:
        gateway = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)  # noqa: S603
    context = ssl.create_default_context(cafile=authority.cert_file)
    admin = f"https://127.0.0.1:{admin_port}"
    try:

        def up() -> bool:
            try:
                return httpx.get(f"{admin}/admin/api/openapi.json", verify=context).is_success
            except httpx.TransportError:
                assert gateway.poll() is None, log.read_text()
                return False

        wait_until(up, timeout=STARTUP_TIMEOUT_S)
        with httpx.Client(base_url=admin, verify=context) as client:
            answer = client.post(
                "/admin/api/v1/session", json={"name": "fay", "password": password}
            )
        assert answer.status_code == 200, answer.text
        assert "Secure" in [part.strip() for part in answer.headers["set-cookie"].split(";")]
        with pytest.raises(httpx.TransportError):  # no plain HTTP on the admin port
            httpx.get(f"http://127.0.0.1:{admin_port}/admin/api/openapi.json", timeout=5)
    finally:
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(timeout=INFRASTRUCTURE_TIMEOUT_S) == 0
