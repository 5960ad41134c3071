"""Client certificates (mTLS) as credentials, beside or instead of API keys.

The TLS handshake has already verified the certificate against ``server.client_ca_file``
(an untrusted one never gets this far). Here it is mapped to a tenant: each tenant lists
the certificates that identify it (``tenants.<name>.client_certificates``: ``cn:``,
``dns:``, ``uri:``, ``email:`` or ``sha256:`` entries, each naming one tenant) and says
how its callers authenticate (``tenants.<name>.authentication``):

==========================  =====================================================
``key`` (default)           a localgate key; a certificate adds nothing
``certificate``             its certificate; a key alone is refused
``key_or_certificate``      either
``key_and_certificate``     both
==========================  =====================================================

Whatever the mode, credentials must agree: a certificate of tenant B with a key of
tenant A is refused (403), as is a certificate matching entries of two tenants. The
google-genai SDK insists on some API key; a value that is not a localgate key, sent with
a certificate, is taken for that placeholder and ignored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from localgate.config import Authentication, ServerSettings, Settings
from localgate.errors import PermissionDenied, Unauthenticated
from localgate.exchange.principal import AuthMethod, ClientCertificate, Principal
from localgate.identity.keys import LOCALGATE_KEY_PREFIX, KeyStore

__all__ = ["CertificateMap", "peer_certificate"]

# Key ids of principals authenticated by a certificate alone: "cert-" and the start of
# its fingerprint (per-key limits can name them).
_CERTIFICATE_KEY_ID = "cert-{}"


def peer_certificate(ssl_object: Any) -> ClientCertificate | None:
    """The verified client certificate of a TLS connection (``ssl.SSLObject``), or None."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    parsed = ssl_object.getpeercert() or {}
    subject = [pair for rdn in parsed.get("subject", ()) for pair in rdn]
    alternative = parsed.get("subjectAltName", ())
    return ClientCertificate(
        subject=",".join(f"{_SHORT.get(name, name)}={value}" for name, value in subject),
        common_names=tuple(value for name, value in subject if name == "commonName"),
        dns_names=tuple(value.lower() for kind, value in alternative if kind == "DNS"),
        uris=tuple(value for kind, value in alternative if kind == "URI"),
        emails=tuple(value for kind, value in alternative if kind == "email"),
        fingerprint=hashlib.sha256(der).hexdigest(),
    )


_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
}


@dataclass(frozen=True, slots=True)
class CertificateMap:
    """Which tenant a certificate identifies, and how each tenant authenticates; built
    from one configuration."""

    tenants: Mapping[str, str]  # "cn:payments-api" -> tenant
    modes: Mapping[str, Authentication]
    required: bool

    @classmethod
    def build(cls, settings: Settings, server: ServerSettings | None = None) -> CertificateMap:
        """The map of ``settings`` (entries are unique per tenant: the loader checks), with
        ``server``'s requirement (default: that of ``settings``)."""
        server = server or settings.server
        return cls(
            tenants={
                entry: name
                for name, tenant in settings.tenants.items()
                for entry in tenant.client_certificates
            },
            modes={name: tenant.authentication for name, tenant in settings.tenants.items()},
            required=(
                server.client_ca_file is not None and server.client_certificates == "required"
            ),
        )

    def tenant_of(self, certificate: ClientCertificate) -> str | None:
        """The tenant ``certificate`` identifies; None if none; 403 if several."""
        entries = [f"sha256:{certificate.fingerprint}"]
        entries += [f"cn:{name}" for name in certificate.common_names]
        entries += [f"dns:{name}" for name in certificate.dns_names]
        entries += [f"uri:{uri}" for uri in certificate.uris]
        entries += [f"email:{address}" for address in certificate.emails]
        found = {self.tenants[entry] for entry in entries if entry in self.tenants}
        if len(found) > 1:
            raise PermissionDenied(
                f"The client certificate ({certificate.describe()}) matches the "
                f"client_certificates of several tenants ({', '.join(sorted(found))}); "
                "the gateway cannot tell which one is calling."
            )
        return found.pop() if found else None

    def authenticate(
        self, keys: KeyStore, credential: str | None, certificate: ClientCertificate | None
    ) -> Principal:
        """The principal of a key and/or certificate, or raise ``Unauthenticated`` (401:
        a credential missing or not valid) or ``PermissionDenied`` (403: valid credentials
        that do not open this door)."""
        if certificate is None:
            if self.required:
                raise Unauthenticated(
                    "This gateway requires a client certificate (server.client_certificates: "
                    "required); connect with the certificate you were issued."
                )
            principal = keys.authenticate(credential)
            if self.modes.get(principal.tenant) == "certificate":
                raise Unauthenticated(
                    f"Tenant {principal.tenant!r} authenticates with client certificates only; "
                    "connect with its certificate (an API key alone is not accepted)."
                )
            if self.modes.get(principal.tenant) == "key_and_certificate":
                raise Unauthenticated(
                    f"Tenant {principal.tenant!r} needs its client certificate as well as the "
                    "API key; connect with its certificate."
                )
            return principal
        by_certificate = self.tenant_of(certificate)
        localgate_key = bool(credential) and str(credential).startswith(LOCALGATE_KEY_PREFIX)
        if by_certificate is None and not localgate_key:
            raise PermissionDenied(
                f"The client certificate ({certificate.describe()}) identifies no tenant; "
                "send an API key, or ask the operator to list the certificate under "
                "tenants.<name>.client_certificates."
            )
        by_key = keys.authenticate(credential) if localgate_key else None
        if by_certificate is None:
            if by_key is None:  # not reached: a localgate key was authenticated or refused
                raise Unauthenticated("No credential was presented.")
            if self.modes.get(by_key.tenant, "key") != "key":
                raise PermissionDenied(
                    f"The client certificate ({certificate.describe()}) is not one of tenant "
                    f"{by_key.tenant!r}'s; connect with that tenant's certificate."
                )
            return by_key
        if by_key is not None and by_key.tenant != by_certificate:
            raise PermissionDenied(
                f"The client certificate identifies tenant {by_certificate!r} but the API key "
                f"{by_key.key_id} belongs to tenant {by_key.tenant!r}; send credentials of one "
                "tenant."
            )
        mode = self.modes.get(by_certificate, "key")
        if mode == "key_and_certificate" and by_key is None:
            raise Unauthenticated(
                f"Tenant {by_certificate!r} needs an API key as well as its client "
                "certificate; send your localgate key."
            )
        method: AuthMethod = "certificate" if by_key is None else "key+certificate"
        return Principal(
            tenant=by_certificate,
            key_id=by_key.key_id
            if by_key
            else _CERTIFICATE_KEY_ID.format(certificate.fingerprint[:16]),
            method=method,
            certificate=certificate.fingerprint,
        )
