"""HTTPS on the gateway's port: the SDK over TLS, certificate rotation without a restart,
bad certificates kept out, plain HTTP refused, old TLS versions refused."""

from __future__ import annotations

import shutil
import socket
import ssl
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from google import genai
from google.genai import types

from localgate.config import ServerSettings
from localgate.frontdoor.tls import ServerTls, TlsFileError
from localgate.testing import FakeGemini
from tests.certificates import Issued, TestAuthority
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S
from tests.frontdoor.tls_gateway import TlsGateway, open_tls, raw_get, run_tls_gateway


class FakeClock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def authority(tmp_path: Path) -> TestAuthority:
    return TestAuthority(tmp_path / "ca")


@pytest.fixture
def served(tmp_path: Path, authority: TestAuthority) -> tuple[Path, Path]:
    """The files the gateway is configured with; tests rewrite them."""
    first = authority.server("gateway-one")
    cert_file, key_file = tmp_path / "tls" / "server.crt", tmp_path / "tls" / "server.key"
    cert_file.parent.mkdir()
    shutil.copy(first.cert_file, cert_file)
    shutil.copy(first.key_file, key_file)
    return cert_file, key_file


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def gateway(
    tmp_path: Path, upstream: FakeGemini, served: tuple[Path, Path], clock: FakeClock
) -> Iterator[TlsGateway]:
    cert_file, key_file = served
    config = f"""
server:
  tls_cert_file: {cert_file}
  tls_key_file: {key_file}
  tls_reload_check_s: 30
"""
    with run_tls_gateway(tmp_path / "data", upstream.base_url, config, clock=clock) as running:
        yield running


def trusting(authority: TestAuthority) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=authority.cert_file)


def served_subject(port: int, context: ssl.SSLContext) -> str:
    with open_tls(port, context) as connection:
        certificate = x509.load_der_x509_certificate(
            connection.getpeercert(binary_form=True) or b""
        )
    return certificate.subject.rfc4514_string()


def install(issued: Issued, served: tuple[Path, Path]) -> None:
    """Rotate: write a new certificate and key over the served files (as cert-manager does,
    by renaming new files over the old)."""
    cert_file, key_file = served
    for source, target in ((issued.cert_file, cert_file), (issued.key_file, key_file)):
        staged = target.with_suffix(".new")
        shutil.copy(source, staged)
        staged.replace(target)


def test_the_sdk_talks_to_the_gateway_over_https(
    gateway: TlsGateway, authority: TestAuthority, upstream: FakeGemini
) -> None:
    with httpx.Client(verify=trusting(authority), timeout=INFRASTRUCTURE_TIMEOUT_S) as http:
        sdk = genai.Client(
            api_key=gateway.keys["acme"],
            http_options=types.HttpOptions(
                base_url=gateway.base_url, api_version="v1beta", httpx_client=http
            ),
        )
        answer = sdk.models.generate_content(model="gemini-2.5-flash", contents="Hello")
        streamed = "".join(
            chunk.text or ""
            for chunk in sdk.models.generate_content_stream(
                model="gemini-2.5-flash", contents="Hello"
            )
        )
    assert answer.text
    assert streamed
    assert len(upstream.requests) == 2


def test_a_client_that_does_not_trust_the_ca_cannot_connect(gateway: TlsGateway) -> None:
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{gateway.base_url}/healthz", timeout=INFRASTRUCTURE_TIMEOUT_S)


def test_plain_http_to_the_tls_port_fails_and_the_port_keeps_serving(
    gateway: TlsGateway, authority: TestAuthority
) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as plain:
        plain.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        received = b""
        try:
            while chunk := plain.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    # No HTTP answer in the clear, no hang: the TLS layer ends the connection.
    assert not received.startswith(b"HTTP/")
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{gateway.port}/healthz", timeout=INFRASTRUCTURE_TIMEOUT_S)
    answer = httpx.get(
        f"{gateway.base_url}/healthz", verify=trusting(authority), timeout=INFRASTRUCTURE_TIMEOUT_S
    )
    assert answer.status_code == 200


def test_tls_1_1_is_refused(gateway: TlsGateway, authority: TestAuthority) -> None:
    old = trusting(authority)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # an old client, on purpose
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
        old.set_ciphers("ALL:@SECLEVEL=0")
        with pytest.raises((ssl.SSLError, OSError)):
            open_tls(gateway.port, old).close()
    with open_tls(gateway.port, trusting(authority)) as modern:
        assert modern.version() in ("TLSv1.2", "TLSv1.3")


def test_a_rotated_certificate_is_served_to_new_connections_while_open_ones_keep_working(
    gateway: TlsGateway, authority: TestAuthority, served: tuple[Path, Path], clock: FakeClock
) -> None:
    context = trusting(authority)
    assert "CN=gateway-one" in served_subject(gateway.port, context)
    kept_open = open_tls(gateway.port, context)
    try:
        assert raw_get(kept_open) == b"HTTP/1.1 200 OK"

        install(authority.server("gateway-two"), served)
        # Before the check interval has passed, handshakes do not look at the files.
        assert "CN=gateway-one" in served_subject(gateway.port, context)
        clock.now += 30  # the next handshake checks, finds the change and reloads
        assert "CN=gateway-two" in served_subject(gateway.port, context)

        # The connection opened before the rotation was not dropped and keeps its cert.
        assert raw_get(kept_open) == b"HTTP/1.1 200 OK"
        peer = x509.load_der_x509_certificate(kept_open.getpeercert(binary_form=True) or b"")
        assert "CN=gateway-one" in peer.subject.rfc4514_string()
    finally:
        kept_open.close()
    assert gateway.tls.reloads == 1


def test_a_bad_new_certificate_keeps_the_old_one_and_is_counted(
    gateway: TlsGateway, authority: TestAuthority, served: tuple[Path, Path]
) -> None:
    context = trusting(authority)
    cert_file = served[0]
    # A new certificate whose key has not been written yet (or was written wrong).
    shutil.copy(authority.server("gateway-mismatched").cert_file, cert_file)
    assert gateway.tls.check() is False
    assert "CN=gateway-one" in served_subject(gateway.port, context)
    assert gateway.tls.reload_failures == 1
    assert "not the private key" in (gateway.tls.last_error or "")
    # Not retried for every handshake while the files stay as they are.
    assert gateway.tls.check() is False
    assert gateway.tls.reload_failures == 1
    metrics = httpx.get(
        f"{gateway.base_url}/metrics", verify=context, timeout=INFRASTRUCTURE_TIMEOUT_S
    ).text
    assert 'localgate_tls_certificate_reloads_total{result="failed"} 1.0' in metrics
    assert "localgate_tls_certificate_expiry_timestamp_seconds" in metrics

    ready = httpx.get(
        f"{gateway.base_url}/readyz", verify=context, timeout=INFRASTRUCTURE_TIMEOUT_S
    )
    assert ready.status_code == 200  # still serving: not a reason to leave the pool
    assert "still serving the previous one" in ready.json()["checks"]["tls"]
    assert "CN=gateway-one" in ready.json()["tls"]["subject"]

    # A garbage certificate file: the same.
    cert_file.write_text("not a certificate")
    assert gateway.tls.check() is False
    assert "holds no PEM certificate" in (gateway.tls.last_error or "")

    install(authority.server("gateway-fixed"), served)
    assert gateway.tls.check() is True
    assert "CN=gateway-fixed" in served_subject(gateway.port, context)
    assert gateway.tls.last_error is None


def test_tls_files_that_cannot_be_used_are_named_at_start(
    tmp_path: Path, authority: TestAuthority
) -> None:
    good = authority.server("good")
    other = authority.server("other")
    cases = [
        (ServerSettings(tls_cert_file=tmp_path / "missing.crt"), "server.tls_cert_file"),
        (
            ServerSettings(tls_cert_file=good.cert_file, tls_key_file=other.key_file),
            "server.tls_key_file",
        ),
        (
            ServerSettings(
                tls_cert_file=good.cert_file,
                tls_key_file=good.key_file,
                client_ca_file=tmp_path / "no-ca.pem",
            ),
            "server.client_ca_file",
        ),
    ]
    for settings, named in cases:
        with pytest.raises(TlsFileError, match=named):
            ServerTls(settings)


def test_an_encrypted_key_is_opened_with_its_password_file(
    tmp_path: Path, authority: TestAuthority
) -> None:
    from cryptography.hazmat.primitives import serialization

    issued = authority.server("encrypted")
    key = serialization.load_pem_private_key(issued.key_file.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret"),
        )
    )
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    settings = ServerSettings(
        tls_cert_file=issued.cert_file, tls_key_file=encrypted, tls_key_password_file=password
    )
    assert "CN=encrypted" in ServerTls(settings).current.subject
    password.write_text("wrong\n")
    with pytest.raises(TlsFileError, match="tls_key_password_file right"):
        ServerTls(settings)


def test_a_new_client_ca_is_picked_up_with_the_certificate_check(
    tmp_path: Path, upstream: FakeGemini, authority: TestAuthority, served: tuple[Path, Path]
) -> None:
    old_clients = TestAuthority(tmp_path / "old-clients", name="old clients")
    new_clients = TestAuthority(tmp_path / "new-clients", name="new clients")
    client_ca = tmp_path / "clients.pem"
    shutil.copy(old_clients.cert_file, client_ca)
    cert_file, key_file = served
    config = f"""
server:
  tls_cert_file: {cert_file}
  tls_key_file: {key_file}
  client_ca_file: {client_ca}
"""
    newcomer = new_clients.client("newcomer")
    with_newcomer = trusting(authority)
    with_newcomer.load_cert_chain(newcomer.cert_file, newcomer.key_file)
    with run_tls_gateway(tmp_path / "data", upstream.base_url, config) as gateway:
        url = f"{gateway.base_url}/healthz"
        with pytest.raises(httpx.TransportError):
            httpx.get(url, verify=with_newcomer, timeout=INFRASTRUCTURE_TIMEOUT_S)
        shutil.copy(new_clients.cert_file, client_ca)
        assert gateway.tls.check() is True
        answer = httpx.get(url, verify=with_newcomer, timeout=INFRASTRUCTURE_TIMEOUT_S)
        assert answer.status_code == 200


def test_a_stream_in_flight_finishes_across_a_rotation(
    gateway: TlsGateway, authority: TestAuthority, served: tuple[Path, Path], upstream: FakeGemini
) -> None:
    context = trusting(authority)
    hold = threading.Event()
    upstream.stream(["one", " two", " three"], hold=hold)  # held after the first event
    url = f"{gateway.base_url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    with (
        httpx.Client(verify=context, timeout=INFRASTRUCTURE_TIMEOUT_S) as http,
        http.stream(
            "POST", url, json={"contents": [{"parts": [{"text": "hi"}]}]},
            headers={"x-goog-api-key": gateway.keys["acme"]},
        ) as response,
    ):  # fmt: skip
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data:"))
        assert "one" in first
        install(authority.server("gateway-rotated"), served)
        assert gateway.tls.check() is True
        assert "CN=gateway-rotated" in served_subject(gateway.port, context)
        hold.set()
        rest = "".join(line for line in lines if line.startswith("data:"))
    assert "two" in rest
    assert "three" in rest
