"""`localgate serve` over HTTPS, a real process: it starts with its certificate, refuses to
start with one line when a TLS file is unusable, and `localgate reload` (SIGHUP) makes it
serve a rotated certificate at once."""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
from cryptography import x509

from localgate.testing import FakeGemini
from tests.certificates import TestAuthority
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, STARTUP_TIMEOUT_S, wait_until
from tests.frontdoor.tls_gateway import open_tls
from tests.gateway_process import free_port


def environment(tmp_path: Path, upstream: FakeGemini) -> dict[str, str]:
    return {
        **{name: value for name, value in os.environ.items() if not name.startswith("LOCALGATE_")},
        "LOCALGATE_DATA_DIR": str(tmp_path / "data"),
        "LOCALGATE_UPSTREAM_URL": upstream.base_url,
        "GEMINI_API_KEY": "upstream-key",
    }


def serve(env: dict[str, str], config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "localgate", "serve", "--config", str(config), "--port", str(port)
    ]  # fmt: skip
    with log.open("ab") as output:
        # The command is fixed: the test starts the gateway it tests.
        return subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)  # noqa: S603


def subject(port: int, context: ssl.SSLContext) -> str:
    with open_tls(port, context) as connection:
        der = connection.getpeercert(binary_form=True) or b""
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def test_serve_https_and_reload_a_rotated_certificate_on_sighup(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    authority = TestAuthority(tmp_path / "ca")
    first = authority.server("first", days=30)
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(first.cert_file, cert_file)
    shutil.copy(first.key_file, key_file)
    config = tmp_path / "localgate.yaml"
    # A check interval longer than the test: only the signal can make it look.
    config.write_text(
        f"server:\n  tls_cert_file: {cert_file}\n  tls_key_file: {key_file}\n"
        "  tls_reload_check_s: 86400\n"
    )
    port = free_port()
    log = tmp_path / "gateway.log"
    gateway = serve(environment(tmp_path, upstream), config, port, log)
    context = ssl.create_default_context(cafile=authority.cert_file)
    try:

        def healthy() -> bool:
            try:
                url = f"https://127.0.0.1:{port}/healthz"
                return httpx.get(url, verify=context, timeout=5).status_code == 200
            except httpx.TransportError:
                assert gateway.poll() is None, log.read_text()
                return False

        wait_until(healthy, timeout=STARTUP_TIMEOUT_S)
        assert f"listening on https://127.0.0.1:{port}" in log.read_text()
        assert "CN=first" in subject(port, context)

        second = authority.server("second", days=30)
        shutil.copy(second.cert_file, cert_file)
        shutil.copy(second.key_file, key_file)
        gateway.send_signal(signal.SIGHUP)
        wait_until(lambda: "CN=second" in subject(port, context))
        assert "TLS certificate reloaded" in log.read_text()
    finally:
        gateway.terminate()
        gateway.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)


def test_serve_refuses_to_start_with_one_line_when_a_tls_file_is_unusable(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    authority = TestAuthority(tmp_path / "ca")
    served, other = authority.server("served"), authority.server("other")
    config = tmp_path / "localgate.yaml"
    config.write_text(
        f"server:\n  tls_cert_file: {served.cert_file}\n  tls_key_file: {other.key_file}\n"
        f"upstream:\n  ca_file: {tmp_path / 'missing-ca.pem'}\n"
    )
    log = tmp_path / "gateway.log"
    # The CA file matters for an https:// upstream only.
    env = {**environment(tmp_path, upstream), "LOCALGATE_UPSTREAM_URL": "https://127.0.0.1:9"}
    gateway = serve(env, config, free_port(), log)
    assert gateway.wait(timeout=STARTUP_TIMEOUT_S) == 1
    lines = log.read_text().strip().splitlines()
    assert lines[0].startswith("localgate: cannot start: server.tls_key_file:")
    assert "is not the private key of the certificate" in lines[0]
    assert lines[1].startswith("localgate: cannot start: upstream.ca_file:")
    assert "Traceback" not in log.read_text()
