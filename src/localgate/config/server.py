"""Where the gateway listens, what it logs, and its traces."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from localgate.config.base import Section

__all__ = [
    "ClientCertificates",
    "LoggingSettings",
    "Sampler",
    "ServerSettings",
    "TelemetrySettings",
    "resolve_workers",
]

# With server.client_ca_file: "optional" asks every client for a certificate and verifies
# the ones given (tenants decide whether they need one); "required" refuses every model
# request that came without one (401), whatever the tenant's setting.
ClientCertificates = Literal["optional", "required"]


class ServerSettings(Section):
    """Where the gateway listens and what it accepts."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    max_body_bytes: int = Field(20 * 1024 * 1024, gt=0)
    # The request line and headers together; larger gets 431. Google's front end takes
    # about as much; the SDK sends well under 1 KiB.
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    # From a connection's start (or a request's first byte) to the end of its headers, and
    # from there to the end of its body: a client that sends slower gets 408 and is
    # disconnected, so half-sent requests cannot hold connections open (slowloris).
    header_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(60.0, gt=0)
    # Connections from one address that are still sending their request; a new one
    # beyond it is refused at once (503). 0: no limit. The addresses in trusted_proxies
    # are exempt: they carry many clients.
    max_pending_connections_per_ip: int = Field(128, ge=0)
    # How long an idle keep-alive connection stays open between requests.
    keep_alive_timeout_s: int = Field(5, ge=1)
    # On SIGTERM: /readyz answers 503 at once, new connections are still accepted for
    # drain_delay_s (for load balancers to notice), then requests and streams in flight
    # have up to drain_timeout_s to finish before the gateway exits.
    drain_delay_s: float = Field(0.0, ge=0)
    drain_timeout_s: float = Field(30.0, gt=0)
    # Processes serving the port, each with its own event loop (docs/workers.md); auto:
    # one per core this process may run on. `localgate serve --workers` overrides it.
    workers: Annotated[int, Field(ge=1, le=512)] | Literal["auto"] = 1
    # Addresses of reverse proxies whose X-Forwarded-For / X-Forwarded-Proto headers
    # are believed (the client address in access log and audit comes from them).
    # Empty: no one's; such headers are ignored and the peer address is recorded.
    trusted_proxies: list[str] = Field(default_factory=list)
    # HTTPS (docs/tls.md): the certificate chain (PEM, leaf first) and its private key
    # (None: in the certificate file); an encrypted key's password in a file of its own.
    # The files are read again when they change (short-lived certificates): new
    # connections get the new certificate, open ones keep theirs.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_key_password_file: Path | None = None
    # How often a new connection's handshake looks whether the files changed (a stat).
    tls_reload_check_s: float = Field(10.0, gt=0)
    # Client certificates (mTLS): the CAs whose certificates are accepted; tenants map
    # certificates to themselves (tenants.<name>.client_certificates).
    client_ca_file: Path | None = None
    client_certificates: ClientCertificates = "optional"

    @model_validator(mode="after")
    def _tls_files_together(self) -> ServerSettings:
        if self.tls_cert_file is None:
            for name in ("tls_key_file", "tls_key_password_file", "client_ca_file"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: needs server.tls_cert_file (HTTPS) as well")
        return self

    @property
    def worker_count(self) -> int:
        """How many worker processes ``workers`` means on this host."""
        return resolve_workers(self.workers)

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            if entry == "*":
                continue
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError as exc:
                raise ValueError(f"{entry!r} is not an IP address, a network or '*'") from exc
        return value


def resolve_workers(workers: int | str) -> int:
    """``workers`` as a number: ``auto`` is the cores this process may run on (its CPU
    affinity, which taskset and container cpusets narrow), not every core of the host."""
    if workers != "auto":
        return int(workers)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class LoggingSettings(Section):
    """Access log and process log."""

    access_log: Path | None = None
    level: Literal["debug", "info", "warning", "error"] = "info"


Sampler = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]


class TelemetrySettings(Section):
    """OpenTelemetry traces (docs/observability.md); the OTEL_* variables override these."""

    # Also on when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) is set.
    enabled: bool = False
    service_name: str = Field("localgate", min_length=1)
    sampler: Sampler = "parentbased_always_on"
    sampler_arg: float = Field(1.0, ge=0, le=1)
    # The request's text after redaction as gen_ai.input.messages; never the original.
    record_redacted_text: bool = False
