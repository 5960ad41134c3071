"""The way out to the upstream: a private CA, a CONNECT proxy (setting or HTTPS_PROXY,
NO_PROXY), a client certificate; a real HTTPS fake upstream and a real proxy on loopback."""

from __future__ import annotations

import base64
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from localgate.config import UpstreamSettings
from localgate.testing import FakeGemini
from localgate.upstream.egress import EgressError, egress_for, proxy_for
from tests.certificates import Issued, TestAuthority
from tests.conftest import run_gateway
from tests.connect_proxy import ConnectProxy

BODY = {"contents": [{"parts": [{"text": "Hello"}]}]}
NO_RETRIES = "retries:\n  max_attempts: 1\n"
P = "http://p:1"


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> TestAuthority:
    return TestAuthority(tmp_path_factory.mktemp("upstream-ca"), name="upstream CA")


@pytest.fixture(scope="module")
def gateway_certificate(authority: TestAuthority) -> Issued:
    """The client certificate the gateway shows the upstream."""
    return authority.client("localgate-egress")


@pytest.fixture(scope="module")
def https_upstream(authority: TestAuthority) -> Iterator[FakeGemini]:
    """A fake Gemini API over HTTPS with a private CA; it asks for client certificates."""
    served = authority.server("upstream")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(served.cert_file, served.key_file)
    context.load_verify_locations(authority.cert_file)
    context.verify_mode = ssl.CERT_OPTIONAL
    with FakeGemini(ssl_context=context) as fake:
        yield fake


@pytest.fixture
def upstream_https(https_upstream: FakeGemini) -> FakeGemini:
    https_upstream.reset()
    return https_upstream


@pytest.fixture
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("https_proxy", "http_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def test_a_private_ca_is_trusted_and_the_client_certificate_shown(
    tmp_path: Path,
    upstream_https: FakeGemini,
    authority: TestAuthority,
    gateway_certificate: Issued,
    no_proxy_environment: None,
) -> None:
    config = f"""
upstream:
  ca_file: {authority.cert_file}
  client_cert_file: {gateway_certificate.cert_file}
  client_key_file: {gateway_certificate.key_file}
"""
    with run_gateway(tmp_path / "data", upstream_https.base_url, config=config) as gateway:
        response = gateway.generate(BODY)
    assert response.status_code == 200, response.text
    peer = upstream_https.requests[-1].peer_certificate
    assert peer is not None
    assert (("commonName", "localgate-egress"),) in peer["subject"]


def test_an_upstream_certificate_from_an_untrusted_ca_is_a_clear_error(
    tmp_path: Path, upstream_https: FakeGemini, no_proxy_environment: None
) -> None:
    # No ca_file: the system's CAs do not know the test CA.
    with run_gateway(tmp_path / "data", upstream_https.base_url, config=NO_RETRIES) as gateway:
        response = gateway.generate(BODY)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["status"] == "UNAVAILABLE"
    assert "does not trust" in error["message"]
    assert "upstream.ca_file" in error["message"]
    assert not upstream_https.requests


def test_the_proxy_setting_sends_traffic_through_connect(
    tmp_path: Path,
    upstream_https: FakeGemini,
    authority: TestAuthority,
    no_proxy_environment: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with ConnectProxy() as proxy, ConnectProxy() as ignored:
        # The setting wins over the environment.
        monkeypatch.setenv("HTTPS_PROXY", ignored.url)
        config = f"upstream:\n  ca_file: {authority.cert_file}\n  proxy_url: {proxy.url}\n"
        with run_gateway(tmp_path / "data", upstream_https.base_url, config=config) as gateway:
            response = gateway.generate(BODY)
        assert response.status_code == 200, response.text
        assert proxy.tunnels == [f"127.0.0.1:{upstream_https.port}"]
        assert ignored.tunnels == []


def test_proxy_credentials_are_sent_to_the_proxy_and_never_logged(
    tmp_path: Path,
    upstream_https: FakeGemini,
    authority: TestAuthority,
    no_proxy_environment: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="localgate")
    with ConnectProxy() as proxy:
        url = proxy.url.replace("http://", "http://egress:pr0xy-secret@")
        config = f"upstream:\n  ca_file: {authority.cert_file}\n  proxy_url: {url}\n"
        with run_gateway(tmp_path / "data", upstream_https.base_url, config=config) as gateway:
            assert gateway.generate(BODY).status_code == 200
    expected = "Basic " + base64.b64encode(b"egress:pr0xy-secret").decode()
    assert proxy.authorizations == [expected]
    assert f"via proxy http://127.0.0.1:{proxy.port}" in caplog.text
    assert "pr0xy-secret" not in caplog.text


def test_https_proxy_from_the_environment_and_no_proxy_bypass(
    tmp_path: Path,
    upstream_https: FakeGemini,
    authority: TestAuthority,
    no_proxy_environment: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = f"upstream:\n  ca_file: {authority.cert_file}\n"
    with ConnectProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        with run_gateway(tmp_path / "via", upstream_https.base_url, config=config) as gateway:
            assert gateway.generate(BODY).status_code == 200
        assert proxy.tunnels == [f"127.0.0.1:{upstream_https.port}"]

        monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.0/8")
        with run_gateway(tmp_path / "bypass", upstream_https.base_url, config=config) as gateway:
            assert gateway.generate(BODY).status_code == 200
        assert len(proxy.tunnels) == 1  # not used again


def test_a_proxy_that_refuses_the_tunnel_is_a_clear_error(
    tmp_path: Path, upstream_https: FakeGemini, authority: TestAuthority
) -> None:
    with ConnectProxy(refuse=True) as proxy:
        config = (
            f"upstream:\n  ca_file: {authority.cert_file}\n  proxy_url: {proxy.url}\n{NO_RETRIES}"
        )
        with run_gateway(tmp_path / "data", upstream_https.base_url, config=config) as gateway:
            response = gateway.generate(BODY)
    assert response.status_code == 502
    assert "proxy refused" in response.json()["error"]["message"]
    assert not upstream_https.requests


def test_named_upstreams_inherit_ca_and_proxy_but_not_the_client_certificate(
    authority: TestAuthority, gateway_certificate: Issued
) -> None:
    from localgate.config import NamedUpstreamSettings

    default = UpstreamSettings(
        ca_file=authority.cert_file,
        proxy_url="http://proxy.corp:3128",
        client_cert_file=gateway_certificate.cert_file,
        client_key_file=gateway_certificate.key_file,
    )
    named = NamedUpstreamSettings(base_url="https://llm.internal")
    egress = egress_for(named.url, named, default, {}, where="upstreams.local")
    assert egress.proxy == "http://proxy.corp:3128"
    assert str(authority.cert_file) in egress.describe()
    assert egress.ssl is not None
    assert egress.ssl.get_ca_certs()  # the private CA, not the system's
    own = NamedUpstreamSettings(base_url="https://llm.internal", proxy_url="direct")
    assert egress_for(own.url, own, default, {"HTTPS_PROXY": P}).proxy is None


def test_unusable_egress_files_name_their_setting(tmp_path: Path, authority: TestAuthority) -> None:
    other = authority.client("other")
    mine = authority.client("mine")
    bad = [
        (UpstreamSettings(ca_file=tmp_path / "none.pem"), "upstream.ca_file"),
        (
            UpstreamSettings(client_cert_file=mine.cert_file, client_key_file=other.key_file),
            "upstream.client_cert_file",
        ),
    ]
    for settings, named in bad:
        with pytest.raises(EgressError, match=named):
            egress_for(settings.base_url, settings, environ={})


@pytest.mark.parametrize(
    ("environ", "url", "expected"),
    [
        ({"HTTPS_PROXY": "http://p:3128"}, "https://api.example", "http://p:3128"),
        ({"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://u:2"}, "https://a", "http://lower:1"),
        ({"HTTPS_PROXY": "p.corp:3128"}, "https://api.example", "http://p.corp:3128"),
        ({"HTTP_PROXY": "http://p:1"}, "https://api.example", None),
        ({"HTTP_PROXY": "http://p:1"}, "http://api.example", P),
        ({"ALL_PROXY": "http://all:1"}, "https://api.example", "http://all:1"),
        ({"HTTPS_PROXY": P, "NO_PROXY": "*"}, "https://api.example", None),
        ({"HTTPS_PROXY": P, "NO_PROXY": "example"}, "https://api.example", None),
        ({"HTTPS_PROXY": P, "NO_PROXY": ".example"}, "https://api.example", None),
        ({"HTTPS_PROXY": P, "NO_PROXY": "ample"}, "https://api.example", P),
        ({"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/8"}, "https://10.1.2.3", None),
        ({"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/8"}, "https://11.1.2.3", P),
        ({"HTTPS_PROXY": P, "NO_PROXY": "api.example:443"}, "https://api.example:443", None),
        ({"HTTPS_PROXY": P, "NO_PROXY": "api.example:8443"}, "https://api.example:443", P),
        ({"HTTPS_PROXY": P, "no_proxy": "::1"}, "https://[::1]:8443", None),
        ({}, "https://api.example", None),
    ],
)  # fmt: skip
def test_proxy_from_the_environment(
    environ: dict[str, str], url: str, expected: str | None
) -> None:
    assert proxy_for(url, None, environ) == expected


def test_the_setting_wins_and_direct_means_none() -> None:
    environ = {"HTTPS_PROXY": "http://env:1"}
    assert proxy_for("https://a", "http://setting:2", environ) == "http://setting:2"
    assert proxy_for("https://a", "direct", environ) is None


def test_a_named_upstream_uses_its_own_ca_and_inherits_the_proxy(
    tmp_path: Path,
    upstream_https: FakeGemini,
    authority: TestAuthority,
    no_proxy_environment: None,
) -> None:
    with ConnectProxy() as proxy:
        config = f"""
upstream:
  proxy_url: {proxy.url}
upstreams:
  private:
    base_url: {upstream_https.base_url}
    api_key_env: [GEMINI_API_KEY]
    ca_file: {authority.cert_file}
routes:
  - models: ["*"]
    upstream: private
"""
        with run_gateway(tmp_path / "data", "http://127.0.0.1:9", config=config) as gateway:
            response = gateway.generate(BODY)
        assert response.status_code == 200, response.text
        assert response.headers["x-localgate-upstream"] == "private"
        assert proxy.tunnels == [f"127.0.0.1:{upstream_https.port}"]


def test_an_upstream_wanting_a_client_certificate_it_did_not_get_is_a_502(
    tmp_path: Path, authority: TestAuthority, no_proxy_environment: None
) -> None:
    served = authority.server("strict-upstream")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(served.cert_file, served.key_file)
    context.load_verify_locations(authority.cert_file)
    context.verify_mode = ssl.CERT_REQUIRED
    config = f"upstream:\n  ca_file: {authority.cert_file}\n{NO_RETRIES}"
    with (
        FakeGemini(ssl_context=context) as strict,
        run_gateway(tmp_path / "data", strict.base_url, config=config) as gateway,
    ):
        response = gateway.generate(BODY)
        assert not strict.requests
    # With TLS 1.3 the upstream's refusal arrives after the client's side of the handshake
    # is done: the gateway sees the connection closed, which is all it can say.
    assert response.status_code == 502
    assert response.json()["error"]["status"] == "UNAVAILABLE"
