"""A tenant's changes to the global policy."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import field_validator

from localgate.config.base import Section
from localgate.config.limits import TenantLimitSettings
from localgate.config.redaction import TenantRedactionSettings
from localgate.config.retrieval import TenantCacheSettings, TenantRagSettings

__all__ = ["CERTIFICATE_MATCH", "NO_TENANT_CHANGES", "Authentication", "TenantSettings"]

# How a tenant's callers authenticate (docs/tls.md): with a localgate key only (the
# default), a client certificate only, either, or both (the certificate and the key
# must then name the same tenant).
Authentication = Literal["key", "certificate", "key_or_certificate", "key_and_certificate"]
# One entry of tenants.<name>.client_certificates: which part of a verified client
# certificate must equal the value: its subject's common name, a DNS, URI or e-mail
# subject alternative name, or the SHA-256 fingerprint of the whole certificate.
CERTIFICATE_MATCH = re.compile(r"^(?P<kind>cn|dns|uri|email|sha256):(?P<value>\S.*)$")
_FINGERPRINT = re.compile(r"^[0-9a-f]{64}$")


class TenantSettings(Section):
    """Per-tenant policy."""

    redaction: TenantRedactionSettings = TenantRedactionSettings()
    cache: TenantCacheSettings = TenantCacheSettings()
    rag: TenantRagSettings = TenantRagSettings()
    local_embeddings: bool | None = None
    # Data residency: the upstreams this tenant's requests may reach (None: any).
    upstreams: tuple[str, ...] | None = None
    limits: TenantLimitSettings = TenantLimitSettings()
    authentication: Authentication = "key"
    # Verified client certificates that identify this tenant: "cn:payments-api",
    # "dns:payments.acme.internal", "uri:spiffe://acme/payments", "email:ops@acme.example",
    # "sha256:<fingerprint>". Needs server.client_ca_file.
    client_certificates: tuple[str, ...] = ()

    @field_validator("client_certificates")
    @classmethod
    def _certificate_matches(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        entries = []
        for entry in value:
            found = CERTIFICATE_MATCH.match(entry.strip())
            if found is None:
                raise ValueError(
                    f"{entry!r}: write cn:<common name>, dns:<name>, uri:<uri>, "
                    "email:<address> or sha256:<fingerprint>"
                )
            kind, match = found["kind"], found["value"].strip()
            if kind == "sha256":
                match = match.replace(":", "").lower()
                if not _FINGERPRINT.match(match):
                    raise ValueError(f"{entry!r}: a SHA-256 fingerprint is 64 hex digits")
            if kind == "dns":
                match = match.lower()
            entries.append(f"{kind}:{match}")
        return tuple(entries)


NO_TENANT_CHANGES = TenantSettings()
