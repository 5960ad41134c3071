"""``localgate doctor``'s TLS checks on real certificate files: valid, expiring soon,
expired, a key that does not match, a key others can read, an unreadable CA; and the
upstream check going through the configured CA."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from localgate.cli import main
from localgate.testing import FakeGemini
from tests.certificates import TestAuthority


@pytest.fixture
def authority(tmp_path: Path) -> TestAuthority:
    return TestAuthority(tmp_path / "ca")


def doctor(tmp_path: Path, config: str, *args: str, upstream: str = "http://127.0.0.1:9") -> Result:
    path = tmp_path / "localgate.yaml"
    path.write_text(config)
    env = {
        "LOCALGATE_DATA_DIR": str(tmp_path / "data"),
        "LOCALGATE_UPSTREAM_URL": upstream,
        "GEMINI_API_KEY": "upstream-key",
        "LOCALGATE_AUDIT_MASTER_KEY": "",
        "LOCALGATE_SIGNATURE_KEY": "",
        "HTTPS_PROXY": "",
        "https_proxy": "",
    }
    return CliRunner().invoke(main, ["doctor", "--config", str(path), "--json", *args], env=env)


def checks(result: Result) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in json.loads(result.stdout)}


def server_config(cert: Path, key: Path, extra: str = "") -> str:
    return f"server:\n  tls_cert_file: {cert}\n  tls_key_file: {key}\n{extra}"


def test_a_valid_certificate_and_client_ca_pass(tmp_path: Path, authority: TestAuthority) -> None:
    served = authority.server("gateway", days=90)
    config = server_config(
        served.cert_file, served.key_file, f"  client_ca_file: {authority.cert_file}\n"
    )
    result = doctor(tmp_path, config, "--offline")
    assert result.exit_code == 0, result.output
    found = checks(result)
    assert "key matches" in found["server certificate"]["detail"]
    assert "CN=gateway" in found["server certificate"]["detail"]
    assert found["server TLS key"]["ok"]
    assert found["client CA"]["ok"]
    assert not found["server certificate"]["warning"]


def test_a_certificate_expiring_soon_is_a_warning_not_a_failure(
    tmp_path: Path, authority: TestAuthority
) -> None:
    served = authority.server("gateway", days=3)
    result = doctor(tmp_path, server_config(served.cert_file, served.key_file), "--offline")
    assert result.exit_code == 0, result.output
    check = checks(result)["server certificate"]
    assert check["ok"]
    assert check["warning"]
    assert "expires within 14 days" in check["detail"]
    lines = CliRunner().invoke(
        main,
        ["doctor", "--config", str(tmp_path / "localgate.yaml"), "--offline"],
        env={"LOCALGATE_DATA_DIR": str(tmp_path / "data"), "LOCALGATE_AUDIT_MASTER_KEY": ""},
    )
    assert "WARN  server certificate" in lines.output
    # A shorter window: no warning.
    quiet = doctor(
        tmp_path,
        server_config(served.cert_file, served.key_file),
        "--offline",
        "--tls-warn-days",
        "1",
    )
    assert not checks(quiet)["server certificate"]["warning"]


def test_an_expired_certificate_fails(tmp_path: Path, authority: TestAuthority) -> None:
    served = authority.server("gateway", days=-1)
    result = doctor(tmp_path, server_config(served.cert_file, served.key_file), "--offline")
    assert result.exit_code == 1
    check = checks(result)["server certificate"]
    assert not check["ok"]
    assert "expired" in check["detail"]


def test_a_key_that_does_not_match_fails(tmp_path: Path, authority: TestAuthority) -> None:
    served, other = authority.server("gateway"), authority.server("other")
    result = doctor(tmp_path, server_config(served.cert_file, other.key_file), "--offline")
    assert result.exit_code == 1
    check = checks(result)["server certificate"]
    assert "is not the key of" in check["detail"]
    assert "server.tls_key_file" in check["fix"]


def test_a_key_others_can_read_fails(tmp_path: Path, authority: TestAuthority) -> None:
    served = authority.server("gateway")
    served.key_file.chmod(0o644)
    result = doctor(tmp_path, server_config(served.cert_file, served.key_file), "--offline")
    assert result.exit_code == 1
    assert checks(result)["server TLS key"]["fix"] == f"chmod 600 {served.key_file}"


def test_an_unreadable_client_ca_fails(tmp_path: Path, authority: TestAuthority) -> None:
    served = authority.server("gateway")
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not PEM")
    config = server_config(served.cert_file, served.key_file, f"  client_ca_file: {garbage}\n")
    result = doctor(tmp_path, config, "--offline")
    assert result.exit_code == 1
    assert "holds no PEM certificate" in checks(result)["client CA"]["detail"]


@pytest.fixture
def https_upstream(authority: TestAuthority) -> Iterator[FakeGemini]:
    served = authority.server("upstream")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(served.cert_file, served.key_file)
    with FakeGemini(ssl_context=context) as fake:
        yield fake


def test_the_upstream_check_trusts_the_configured_ca(
    tmp_path: Path, authority: TestAuthority, https_upstream: FakeGemini
) -> None:
    without = doctor(tmp_path, "", upstream=https_upstream.base_url)
    assert not checks(without)["upstream"]["ok"]
    assert "CERTIFICATE_VERIFY_FAILED" in checks(without)["upstream"]["detail"]

    config = f"upstream:\n  ca_file: {authority.cert_file}\n"
    result = doctor(tmp_path, config, upstream=https_upstream.base_url)
    found = checks(result)
    assert found["upstream"]["ok"], found["upstream"]
    assert found["upstream CA"]["ok"]
    assert https_upstream.requests[-1].headers["x-goog-api-key"] == "upstream-key"
