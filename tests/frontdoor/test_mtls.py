"""Client certificates as credentials: mapped to tenants, alone or with keys, and every way
of presenting the wrong ones refused in the Gemini envelope (or at the handshake)."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID
from google import genai
from google.genai import errors, types

from localgate.audit.database import SqliteDatabase
from localgate.audit.records import parse_header
from localgate.audit.store import AuditReader
from localgate.testing import FakeGemini
from tests.certificates import Issued, TestAuthority
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, wait_until
from tests.frontdoor.tls_gateway import TlsGateway, run_tls_gateway

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
BODY = {"contents": [{"parts": [{"text": "Hello"}]}]}
# What an application gives the SDK when its certificate is its credential: the SDK wants
# some api_key, and it is not a localgate key.
PLACEHOLDER = "unused-with-mtls"


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> TestAuthority:
    return TestAuthority(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def certificates(authority: TestAuthority) -> dict[str, Issued]:
    return {
        "payments": authority.client("payments-api"),
        "billing": authority.client("billing", dns=("billing.acme.internal",)),
        "reports": authority.client("reports", uris=("spiffe://acme.internal/reports",)),
        "stranger": authority.client("stranger"),
    }


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeGemini,
    authority: TestAuthority,
    certificates: dict[str, Issued],
) -> Iterator[TlsGateway]:
    server = authority.server("gateway")
    config = f"""
server:
  tls_cert_file: {server.cert_file}
  tls_key_file: {server.key_file}
  client_ca_file: {authority.cert_file}
tenants:
  payments:
    authentication: certificate
    client_certificates: ["cn:payments-api"]
  billing:
    authentication: key_and_certificate
    client_certificates: ["dns:billing.acme.internal"]
  reports:
    authentication: key_or_certificate
    client_certificates: ["uri:spiffe://acme.internal/reports"]
"""
    with run_tls_gateway(
        tmp_path_factory.mktemp("mtls") / "data",
        fake_upstream.base_url,
        config,
        tenants=("payments", "billing", "reports", "plain"),
    ) as running:
        yield running


def context(authority: TestAuthority, certificate: Issued | None) -> ssl.SSLContext:
    made = ssl.create_default_context(cafile=authority.cert_file)
    if certificate is not None:
        made.load_cert_chain(certificate.cert_file, certificate.key_file)
    return made


def post(
    gateway: TlsGateway, authority: TestAuthority, certificate: Issued | None, key: str | None
) -> httpx.Response:
    headers = {"x-goog-api-key": key} if key else {}
    with httpx.Client(
        verify=context(authority, certificate), timeout=INFRASTRUCTURE_TIMEOUT_S
    ) as http:
        return http.post(f"{gateway.base_url}{GENERATE}", json=BODY, headers=headers)


def audit_header(gateway: TlsGateway, request_id: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def written() -> bool:
        reader = AuditReader(SqliteDatabase(gateway.settings.audit_db_path))
        try:
            found[:] = [parse_header(r.header or b"{}") for r in reader.by_request(request_id)]
        finally:
            reader.close()
        return len(found) >= 1

    wait_until(written)
    return found[0]


def access_record(gateway: TlsGateway, request_id: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def written() -> bool:
        path = gateway.settings.access_log_path
        lines = path.read_text().splitlines() if path.exists() else []
        found[:] = [r for r in map(json.loads, lines) if r["request_id"] == request_id]
        return bool(found)

    wait_until(written)
    return found[0]


def refusal(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status
    assert error["status"] == ("UNAUTHENTICATED" if status == 401 else "PERMISSION_DENIED")
    return str(error["message"])


def test_the_sdk_authenticates_with_a_client_certificate_alone(
    gateway: TlsGateway,
    authority: TestAuthority,
    certificates: dict[str, Issued],
    upstream: FakeGemini,
) -> None:
    payments = certificates["payments"]
    with httpx.Client(
        verify=context(authority, payments), timeout=INFRASTRUCTURE_TIMEOUT_S
    ) as http:
        sdk = genai.Client(
            api_key=PLACEHOLDER,
            http_options=types.HttpOptions(
                base_url=gateway.base_url, api_version="v1beta", httpx_client=http
            ),
        )
        answer = sdk.models.generate_content(model="gemini-2.5-flash", contents="Hello")
    assert answer.text
    # Neither the placeholder nor anything of the certificate goes upstream.
    sent = upstream.requests[-1].headers
    assert PLACEHOLDER not in str(sent)

    response = post(gateway, authority, payments, None)
    assert response.status_code == 200
    header = audit_header(gateway, response.headers["x-request-id"])
    assert header["tenant"] == "payments"
    assert header["auth"] == "certificate"
    assert header["certificate"] == payments.fingerprint
    assert header["key_id"] == f"cert-{payments.fingerprint[:16]}"
    access = access_record(gateway, response.headers["x-request-id"])
    assert (access["tenant"], access["auth"]) == ("payments", "certificate")


def test_a_certificate_only_tenant_refuses_its_key_alone(
    gateway: TlsGateway, authority: TestAuthority
) -> None:
    message = refusal(post(gateway, authority, None, gateway.keys["payments"]), 401)
    assert "client certificates only" in message


def test_a_request_without_certificate_or_key_is_refused(
    gateway: TlsGateway, authority: TestAuthority
) -> None:
    assert "No API key" in refusal(post(gateway, authority, None, None), 401)


def test_a_trusted_certificate_mapped_to_no_tenant_is_refused(
    gateway: TlsGateway, authority: TestAuthority, certificates: dict[str, Issued]
) -> None:
    message = refusal(post(gateway, authority, certificates["stranger"], PLACEHOLDER), 403)
    assert "identifies no tenant" in message
    assert "CN=stranger" in message


def test_a_certificate_from_another_ca_fails_the_handshake(
    gateway: TlsGateway, authority: TestAuthority, tmp_path: Path
) -> None:
    impostor = TestAuthority(tmp_path / "impostor", name="impostor CA").client("payments-api")
    with pytest.raises(httpx.TransportError):
        post(gateway, authority, impostor, PLACEHOLDER)


def test_a_certificate_of_one_tenant_with_the_key_of_another_is_refused(
    gateway: TlsGateway, authority: TestAuthority, certificates: dict[str, Issued]
) -> None:
    message = refusal(
        post(gateway, authority, certificates["payments"], gateway.keys["reports"]), 403
    )
    assert "identifies tenant 'payments'" in message
    assert "belongs to tenant 'reports'" in message
    # And the other way round: a key-only tenant's key with a mapped certificate.
    message = refusal(post(gateway, authority, certificates["reports"], gateway.keys["plain"]), 403)
    assert "belongs to tenant 'plain'" in message


def test_a_tenant_needing_both_refuses_either_alone_and_takes_both(
    gateway: TlsGateway, authority: TestAuthority, certificates: dict[str, Issued]
) -> None:
    billing, key = certificates["billing"], gateway.keys["billing"]
    assert "API key as well" in refusal(post(gateway, authority, billing, PLACEHOLDER), 401)
    assert "client certificate as well" in refusal(post(gateway, authority, None, key), 401)
    both = post(gateway, authority, billing, key)
    assert both.status_code == 200, both.text
    header = audit_header(gateway, both.headers["x-request-id"])
    assert (header["tenant"], header["auth"]) == ("billing", "key+certificate")


def test_a_key_or_certificate_tenant_takes_either(
    gateway: TlsGateway, authority: TestAuthority, certificates: dict[str, Issued]
) -> None:
    by_certificate = post(gateway, authority, certificates["reports"], None)
    by_key = post(gateway, authority, None, gateway.keys["reports"])
    assert (by_certificate.status_code, by_key.status_code) == (200, 200)
    assert audit_header(gateway, by_key.headers["x-request-id"])["auth"] == "key"


def test_key_only_tenants_are_unaffected_by_a_certificate_of_nobody(
    gateway: TlsGateway, authority: TestAuthority, certificates: dict[str, Issued]
) -> None:
    # A company CA issues certificates for other uses; a key-only app that happens to
    # present one still authenticates with its key.
    response = post(gateway, authority, certificates["stranger"], gateway.keys["plain"])
    assert response.status_code == 200
    assert post(gateway, authority, None, gateway.keys["plain"]).status_code == 200


def test_the_sdk_sees_a_refusal_as_its_usual_client_error(
    gateway: TlsGateway, authority: TestAuthority, certificates: dict[str, Issued]
) -> None:
    with httpx.Client(
        verify=context(authority, certificates["stranger"]), timeout=INFRASTRUCTURE_TIMEOUT_S
    ) as http:
        sdk = genai.Client(
            api_key=PLACEHOLDER,
            http_options=types.HttpOptions(
                base_url=gateway.base_url, api_version="v1beta", httpx_client=http
            ),
        )
        with pytest.raises(errors.ClientError) as raised:
            sdk.models.generate_content(model="gemini-2.5-flash", contents="Hello")
    assert raised.value.code == 403


def test_an_expired_client_certificate_fails_the_handshake(
    gateway: TlsGateway, authority: TestAuthority
) -> None:
    expired = authority.client("payments-api", days=-1)
    with pytest.raises(httpx.TransportError):
        post(gateway, authority, expired, PLACEHOLDER)


def test_a_server_certificate_cannot_pose_as_a_client(
    gateway: TlsGateway, authority: TestAuthority
) -> None:
    # Issued by the trusted CA for a server named like the tenant's entry, but only for
    # server authentication (extended key usage): not a client credential.
    server_only = authority._issue("payments-api", [], ExtendedKeyUsageOID.SERVER_AUTH, 7)
    with pytest.raises(httpx.TransportError):
        post(gateway, authority, server_only, PLACEHOLDER)


def test_required_refuses_model_requests_without_a_certificate_but_not_probes(
    tmp_path: Path, fake_upstream: FakeGemini, authority: TestAuthority
) -> None:
    server = authority.server("gateway")
    config = f"""
server:
  tls_cert_file: {server.cert_file}
  tls_key_file: {server.key_file}
  client_ca_file: {authority.cert_file}
  client_certificates: required
"""
    with run_tls_gateway(tmp_path / "data", fake_upstream.base_url, config) as required:
        key = required.keys["acme"]
        message = refusal(post(required, authority, None, key), 401)
        assert "requires a client certificate" in message
        with httpx.Client(verify=context(authority, None)) as http:
            assert http.get(f"{required.base_url}/healthz").status_code == 200
            assert http.get(f"{required.base_url}/readyz").status_code == 200
        # With some certificate of the company's CA, the key-only tenant's key works.
        anyone = authority.client("any-app")
        assert post(required, authority, anyone, key).status_code == 200
