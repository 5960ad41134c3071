"""The TLS checks of ``localgate doctor``: the server's certificate and key, the client CAs,
the upstreams' CA files and client certificates.

Each file is read as the gateway will read it (``ssl`` loads the certificate with its
key, so a key that does not match fails here as it would at start); the certificates are
parsed with ``cryptography`` for what ``ssl`` does not say: when they expire.
"""

from __future__ import annotations

import ssl
import stat
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509

from localgate.admin.checks import Check
from localgate.config import Settings
from localgate.upstream.egress import egress_problems

__all__ = ["tls_checks"]


def tls_checks(
    settings: Settings,
    environ: Mapping[str, str],
    *,
    warn_days: float,
    now: datetime | None = None,
) -> list[Check]:
    """One check per TLS file in use: readable, matching, not expired; a warning when a
    certificate expires within ``warn_days``."""
    when = now or datetime.now(UTC)
    server = settings.server
    checks: list[Check] = []
    if server.tls_cert_file is not None:
        checks.append(_server_certificate(settings, when, warn_days))
        key_file = server.tls_key_file or server.tls_cert_file
        checks.append(_private_file("server TLS key", key_file))
    if server.client_ca_file is not None:
        checks.append(
            _certificates("client CA", server.client_ca_file, when, warn_days, "client_ca_file")
        )
    egress = [("upstream", settings.upstream)] + [
        (f"upstreams.{name}", named) for name, named in settings.upstreams.items()
    ]
    for where, upstream in egress:
        if upstream.ca_file is not None:
            checks.append(
                _certificates(f"{where} CA", upstream.ca_file, when, warn_days, f"{where}.ca_file")
            )
        if upstream.client_cert_file is not None:
            checks.append(
                _certificates(
                    f"{where} client certificate",
                    upstream.client_cert_file,
                    when,
                    warn_days,
                    f"{where}.client_cert_file",
                    leaf_only=True,
                )
            )
            key_file = upstream.client_key_file or upstream.client_cert_file
            checks.append(_private_file(f"{where} client key", key_file))
    problems = egress_problems(settings, environ)
    if problems:
        checks.append(
            Check(
                "upstream TLS",
                False,
                "; ".join(problems),
                "give the gateway the right PEM files (docs/tls.md#upstream-egress)",
            )
        )
    return checks


def _server_certificate(settings: Settings, now: datetime, warn_days: float) -> Check:
    server = settings.server
    cert_file = server.tls_cert_file
    if cert_file is None:  # the caller checked
        return Check("server certificate", True, "no HTTPS (server.tls_cert_file unset)")
    name = "server certificate"
    found = _read(name, cert_file, "server.tls_cert_file")
    if isinstance(found, Check):
        return found
    password = None
    if server.tls_key_password_file is not None:
        try:
            password = server.tls_key_password_file.read_bytes().rstrip(b"\r\n")
        except OSError as exc:
            return Check(
                name,
                False,
                f"{server.tls_key_password_file} cannot be read ({exc.strerror})",
                "fix server.tls_key_password_file",
            )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_file, server.tls_key_file, password)
    except (OSError, ssl.SSLError) as exc:
        return Check(
            name,
            False,
            f"{server.tls_key_file or cert_file} is not the key of {cert_file} "
            f"({getattr(exc, 'reason', None) or exc.strerror or type(exc).__name__})",
            "point server.tls_key_file at the certificate's private key (and "
            "server.tls_key_password_file at its password, if it is encrypted)",
        )
    leaf = found[0]
    return _expiry(name, leaf, now, warn_days, f"{cert_file}: key matches", "server.tls_cert_file")


def _certificates(
    name: str,
    path: Path,
    now: datetime,
    warn_days: float,
    setting: str,
    *,
    leaf_only: bool = False,
) -> Check:
    found = _read(name, path, setting)
    if isinstance(found, Check):
        return found
    if leaf_only:
        return _expiry(name, found[0], now, warn_days, f"{path}", setting)
    # A bundle: the first to expire is the one to watch.
    soonest = min(found, key=lambda certificate: certificate.not_valid_after_utc)
    detail = f"{path}: {len(found)} certificate(s)"
    return _expiry(name, soonest, now, warn_days, detail, setting)


def _expiry(
    name: str,
    certificate: x509.Certificate,
    now: datetime,
    warn_days: float,
    detail: str,
    setting: str,
) -> Check:
    subject = certificate.subject.rfc4514_string()
    not_after = certificate.not_valid_after_utc
    days = (not_after - now).total_seconds() / 86400
    if days < 0:
        return Check(
            name,
            False,
            f"{detail}; {subject} expired on {not_after:%Y-%m-%d %H:%M} UTC",
            f"renew it and replace the file ({setting})",
        )
    if certificate.not_valid_before_utc > now:
        return Check(
            name,
            False,
            f"{detail}; {subject} is not valid before {certificate.not_valid_before_utc:%Y-%m-%d}",
            "check this host's clock, or the certificate's dates",
        )
    line = f"{detail}; {subject} valid until {not_after:%Y-%m-%d} ({days:.0f} days)"
    if days < warn_days:
        return Check(
            name,
            True,
            f"{line}: expires within {warn_days:g} days",
            f"renew it soon ({setting}); the gateway picks up the new file without a restart",
            warning=True,
        )
    return Check(name, True, line)


def _read(name: str, path: Path, setting: str) -> list[x509.Certificate] | Check:
    try:
        data = path.read_bytes()
    except OSError as exc:
        return Check(name, False, f"{path} cannot be read ({exc.strerror})", f"fix {setting}")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        return Check(
            name, False, f"{path} holds no PEM certificate", f"{setting} must be a PEM file"
        )


def _private_file(name: str, path: Path) -> Check:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as exc:
        return Check(name, False, f"{path} cannot be read ({exc.strerror})", f"fix {path}")
    if mode & 0o077:
        return Check(
            name, False, f"{path} can be read by others (mode {mode:04o})", f"chmod 600 {path}"
        )
    return Check(name, True, f"{path}: owner only")
