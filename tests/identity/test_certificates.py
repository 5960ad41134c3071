"""Client certificates mapped to tenants: every combination of certificate and key, the
gateway-wide requirement, ambiguous certificates, and the configuration's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from localgate.config import Settings, load_settings
from localgate.errors import ConfigError, PermissionDenied, Unauthenticated
from localgate.exchange.principal import ClientCertificate
from localgate.identity import SqliteKeyStore
from localgate.identity.certificates import CertificateMap


def certificate(
    cn: str = "app",
    *,
    dns: tuple[str, ...] = (),
    uris: tuple[str, ...] = (),
    emails: tuple[str, ...] = (),
    fingerprint: str = "ab" * 32,
) -> ClientCertificate:
    return ClientCertificate(
        subject=f"CN={cn}",
        common_names=(cn,),
        dns_names=dns,
        uris=uris,
        emails=emails,
        fingerprint=fingerprint,
    )


def settings(tmp_path: Path, config: str) -> Settings:
    path = tmp_path / "localgate.yaml"
    path.write_text(config)
    return load_settings(path, {"LOCALGATE_DATA_DIR": str(tmp_path / "data")})[0]


TLS = """
server:
  tls_cert_file: /etc/localgate/tls.crt
  client_ca_file: /etc/localgate/clients.pem
  client_certificates: {mode}
"""


@pytest.fixture
def keys(tmp_path: Path) -> SqliteKeyStore:
    return SqliteKeyStore(tmp_path / "keys.db")


def test_every_kind_of_entry_maps_and_fingerprints_pin(tmp_path: Path) -> None:
    mapping = CertificateMap.build(
        settings(
            tmp_path,
            TLS.format(mode="optional")
            + f"""
tenants:
  a: {{authentication: certificate, client_certificates: ["dns:App.Acme.Internal"]}}
  b: {{authentication: certificate, client_certificates: ["email:ops@acme.example"]}}
  c: {{authentication: certificate, client_certificates: ["sha256:{"CD:" * 31}CD"]}}
""",
        )
    )
    assert mapping.tenant_of(certificate("x", dns=("app.acme.internal",))) == "a"
    assert mapping.tenant_of(certificate("x", emails=("ops@acme.example",))) == "b"
    assert mapping.tenant_of(certificate("x", fingerprint="cd" * 32)) == "c"
    assert mapping.tenant_of(certificate("app.acme.internal")) is None  # a CN is not a DNS name


def test_a_certificate_matching_two_tenants_is_refused(tmp_path: Path) -> None:
    mapping = CertificateMap.build(
        settings(
            tmp_path,
            TLS.format(mode="optional")
            + """
tenants:
  a: {authentication: certificate, client_certificates: ["cn:shared"]}
  b: {authentication: certificate, client_certificates: ["dns:b.internal"]}
""",
        )
    )
    with pytest.raises(PermissionDenied, match="several tenants"):
        mapping.tenant_of(certificate("shared", dns=("b.internal",)))


def test_required_refuses_every_request_without_a_certificate(
    tmp_path: Path, keys: SqliteKeyStore
) -> None:
    mapping = CertificateMap.build(settings(tmp_path, TLS.format(mode="required")))
    key = keys.create("plain").key.reveal()
    with pytest.raises(Unauthenticated, match="requires a client certificate"):
        mapping.authenticate(keys, key, None)
    # A certificate of nobody plus a key of a key-only tenant is enough.
    principal = mapping.authenticate(keys, key, certificate("someone"))
    assert (principal.tenant, principal.method) == ("plain", "key")


def test_a_revoked_key_is_refused_even_with_the_tenants_certificate(
    tmp_path: Path, keys: SqliteKeyStore
) -> None:
    mapping = CertificateMap.build(
        settings(
            tmp_path,
            TLS.format(mode="optional")
            + """
tenants:
  a: {authentication: key_or_certificate, client_certificates: ["cn:a-app"]}
""",
        )
    )
    issued = keys.create("a")
    keys.revoke(issued.key_id)
    with pytest.raises(PermissionDenied, match="revoked"):
        mapping.authenticate(keys, issued.key.reveal(), certificate("a-app"))
    with pytest.raises(Unauthenticated, match="not valid"):
        mapping.authenticate(keys, "lg_0000000000000000_" + "x" * 43, certificate("a-app"))


@pytest.mark.parametrize(
    ("tenants", "problem"),
    [
        ("a: {authentication: certificate}", "needs the certificates"),
        ('a: {client_certificates: ["cn:x"]}', "client_certificates are never used"),
        (
            'a: {authentication: certificate, client_certificates: ["cn:x"]}\n'
            '  b: {authentication: certificate, client_certificates: ["cn:x"]}',
            "also identifies tenant 'a'",
        ),
        ('a: {authentication: certificate, client_certificates: ["subject:x"]}', "write cn:"),
        ('a: {authentication: certificate, client_certificates: ["sha256:abc"]}', "64 hex"),
    ],
)
def test_bad_certificate_settings_are_rejected(tmp_path: Path, tenants: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        settings(tmp_path, TLS.format(mode="optional") + f"tenants:\n  {tenants}\n")
    assert problem in " ".join(raised.value.problems)


def test_certificate_authentication_needs_a_client_ca(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        settings(
            tmp_path,
            'tenants:\n  a: {authentication: certificate, client_certificates: ["cn:x"]}\n',
        )
    assert "server.client_ca_file" in " ".join(raised.value.problems)


def test_tls_files_need_a_certificate(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        settings(tmp_path, "server:\n  client_ca_file: /etc/ca.pem\n")
    assert "needs server.tls_cert_file" in " ".join(raised.value.problems)
    with pytest.raises(ConfigError) as raised:
        settings(tmp_path, "upstream:\n  proxy_url: socks5://proxy:1080\n")
    assert "http:// or https:// proxy URL" in " ".join(raised.value.problems)


def test_the_stage_follows_reloaded_tenants_but_keeps_the_servers_start_up_mode(
    tmp_path: Path, keys: SqliteKeyStore
) -> None:
    from localgate.exchange.context import RequestContext
    from localgate.identity.stage import IdentityStage
    from localgate.policy import PolicySnapshot

    first = settings(tmp_path, TLS.format(mode="optional"))
    current = [PolicySnapshot.build(first)]
    stage = IdentityStage(keys, lambda: current[0], first.server)
    ctx = RequestContext(request_id="r1", route=None)
    with pytest.raises(PermissionDenied, match="identifies no tenant"):
        stage.authenticate(ctx, None, certificate("a-app"))

    # A reload maps the certificate, and (restart-only) asks for certificates everywhere.
    reloaded = settings(
        tmp_path,
        TLS.format(mode="required")
        + 'tenants:\n  a: {authentication: certificate, client_certificates: ["cn:a-app"]}\n',
    )
    current[0] = PolicySnapshot.build(reloaded, version=2)
    stage.authenticate(ctx, None, certificate("a-app"))
    assert ctx.principal is not None
    assert (ctx.principal.tenant, ctx.principal.method) == ("a", "certificate")
    # Still "optional" until a restart: a key alone is accepted.
    stage.authenticate(ctx, keys.create("plain").key.reveal(), None)
    assert ctx.principal.tenant == "plain"
