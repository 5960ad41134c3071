"""Who is calling, as the identity stage establishes it and every later stage reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["AuthMethod", "ClientCertificate", "Principal"]

# How the caller proved who they are (the audit trail records it).
AuthMethod = Literal["key", "certificate", "key+certificate"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the tenant, the key they used (or their certificate's id), and how
    they authenticated."""

    tenant: str
    key_id: str
    method: AuthMethod = "key"
    # The SHA-256 fingerprint of the client certificate that identified the tenant.
    certificate: str | None = None


@dataclass(frozen=True, slots=True)
class ClientCertificate:
    """A client certificate the TLS handshake verified against ``server.client_ca_file``."""

    subject: str
    common_names: tuple[str, ...]
    dns_names: tuple[str, ...]
    uris: tuple[str, ...]
    emails: tuple[str, ...]
    fingerprint: str  # SHA-256 of the DER certificate, hex

    def describe(self) -> str:
        """For messages: the subject and the start of the fingerprint."""
        return f"{self.subject or '(empty subject)'}, sha256 {self.fingerprint[:16]}…"
