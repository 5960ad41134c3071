"""HTTPS on the gateway's port: the server certificate, reloaded when its files change.

Short-lived certificates (cert-manager, Vault, ACME) are rewritten on disk every few
hours or days. The gateway never restarts for them: the TLS context uvicorn listens with
has a handshake callback (OpenSSL's server-name callback, called for every handshake,
with or without SNI) that hands each new connection the current certificate's context.
At most every ``server.tls_reload_check_s`` that callback looks at the files (a ``stat``
each); when one has changed, a whole new context is built from them and, only if that
succeeds, swapped in. Connections already open keep the certificate they were made with;
a bad new file (unreadable, a key that does not match) is logged and counted, and the
last good certificate stays in use until the files change again. ``localgate reload``
(SIGHUP) checks at once.

TLS 1.2 is the oldest version accepted; TLS 1.2 connections get forward-secret AEAD
ciphers only. With ``server.client_ca_file`` every client is asked for a certificate,
and one that is given must chain to those CAs (the handshake fails otherwise: Python's
``ssl`` verifies during the handshake and offers no way to defer it); whether a request
needs one is the identity stage's call, so refusals come as Gemini error envelopes.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from localgate.config import ServerSettings

__all__ = ["ServerTls", "TlsFileError", "load_certificate_chain", "tls_server_options"]

logger = logging.getLogger("localgate.tls")

_TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!MD5:!DSS"
# A file's identity for change detection: a rewrite, a rename over it or a symlink swap
# (Kubernetes secrets) changes at least one of these.
_Signature = tuple[tuple[int, int, int, int] | None, ...]


class TlsFileError(Exception):
    """A TLS file of the server cannot be used; the message names the setting and why."""


@dataclass(frozen=True, slots=True)
class LoadedCertificate:
    """What the gateway serves now: its context, the leaf's subject, expiry, fingerprint."""

    context: ssl.SSLContext
    subject: str
    not_after: datetime
    fingerprint: str


class ServerTls:
    """The server's TLS contexts; ``check()`` swaps in a changed certificate.

    ``context`` is the one uvicorn listens with (it never changes); each handshake is
    moved to the current certificate's context by the callback.
    """

    def __init__(
        self, settings: ServerSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if settings.tls_cert_file is None:
            raise ValueError("server.tls_cert_file is not set")
        self._settings = settings
        self._clock = clock
        self._files = [
            path
            for path in (
                settings.tls_cert_file,
                settings.tls_key_file,
                settings.tls_key_password_file,
                settings.client_ca_file,
            )
            if path is not None
        ]
        self._signature = self._stat()
        self.current = self._load()
        self.context = self.current.context
        self.context.sni_callback = self._handshake
        self._next_check = clock() + settings.tls_reload_check_s
        self._failed: _Signature | None = None
        self.reloads = 0
        self.reload_failures = 0
        self.last_error: str | None = None
        current = self.current
        expired = current.not_after <= datetime.now(UTC)
        logger.log(
            logging.ERROR if expired else logging.INFO,
            "TLS certificate %s: %s, sha256 %s%s",
            "EXPIRED on " + current.not_after.isoformat()
            if expired
            else "valid until " + current.not_after.isoformat(),
            current.subject,
            current.fingerprint,
            ", client certificates verified against " + str(settings.client_ca_file)
            if settings.client_ca_file
            else "",
        )

    def check(self) -> bool:
        """Load the files again if they changed since the last load; True if a new
        certificate is now served. A failure keeps the current one (logged, counted)."""
        signature = self._stat()
        if signature == self._signature or signature == self._failed:
            return False
        try:
            loaded = self._load()
        except Exception as exc:  # runs inside handshakes: never let one fail
            self._failed = signature
            self.reload_failures += 1
            self.last_error = str(exc) if isinstance(exc, TlsFileError) else repr(exc)
            logger.error(
                "TLS certificate not reloaded, still serving %s (expires %s): %s",
                self.current.subject,
                self.current.not_after.isoformat(),
                self.last_error,
                exc_info=not isinstance(exc, TlsFileError),
            )
            return False
        self.current = loaded
        self._signature = signature
        self._failed = None
        self.last_error = None
        self.reloads += 1
        logger.info(
            "TLS certificate reloaded: %s, expires %s, sha256 %s",
            loaded.subject,
            loaded.not_after.isoformat(),
            loaded.fingerprint,
        )
        return True

    @property
    def not_after_timestamp(self) -> float:
        """When the certificate served now expires (Unix time; for the metrics)."""
        return self.current.not_after.timestamp()

    def _handshake(self, connection: Any, server_name: str | None, context: Any) -> None:
        now = self._clock()
        if now >= self._next_check:
            self._next_check = now + self._settings.tls_reload_check_s
            self.check()
        current = self.current.context
        if current is not context:
            connection.context = current

    def _stat(self) -> _Signature:
        signature: list[tuple[int, int, int, int] | None] = []
        for path in self._files:
            try:
                found = os.stat(path)
            except OSError:
                signature.append(None)
                continue
            signature.append((found.st_mtime_ns, found.st_size, found.st_ino, found.st_dev))
        return tuple(signature)

    def _load(self) -> LoadedCertificate:
        settings = self._settings
        cert_file = settings.tls_cert_file
        if cert_file is None:  # checked in __init__
            raise TlsFileError("server.tls_cert_file is not set")
        password = _password(settings.tls_key_password_file)
        leaf = load_certificate_chain(cert_file, "server.tls_cert_file")[0]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(_TLS12_CIPHERS)
        # No renegotiation: the client certificate read at the handshake stays the
        # connection's (a TLS 1.2 client could otherwise present another one later).
        context.options |= (
            ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
        )
        key_file = settings.tls_key_file
        try:
            context.load_cert_chain(cert_file, key_file, password)
        except (OSError, ssl.SSLError) as exc:
            where = "server.tls_key_file" if key_file else "server.tls_cert_file"
            raise TlsFileError(
                f"{where}: {key_file or cert_file} is not the private key of the certificate "
                f"in {cert_file}, or cannot be read ({_reason(exc)})"
                + ("; is server.tls_key_password_file right?" if password else "")
            ) from exc
        ca_file = settings.client_ca_file
        if ca_file is not None:
            load_certificate_chain(ca_file, "server.client_ca_file")
            try:
                context.load_verify_locations(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise TlsFileError(
                    f"server.client_ca_file: {ca_file} cannot be used ({_reason(exc)})"
                ) from exc
            # Asked of every client; whether a request needs one, identity decides.
            context.verify_mode = ssl.CERT_OPTIONAL
        return LoadedCertificate(
            context=context,
            subject=leaf.subject.rfc4514_string(),
            not_after=leaf.not_valid_after_utc,
            fingerprint=leaf.fingerprint(hashes.SHA256()).hex(),
        )


def tls_server_options(tls: ServerTls | None) -> dict[str, Any]:
    """uvicorn's options for ``tls`` (none for plain HTTP): it listens with its context."""
    if tls is None:
        return {}

    def context_factory(config: Any, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        return tls.context

    return {"ssl_context_factory": context_factory}


def load_certificate_chain(path: Path, where: str) -> list[x509.Certificate]:
    """The PEM certificates in ``path``; ``TlsFileError`` naming ``where`` if none."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TlsFileError(f"{where}: {path} cannot be read ({_reason(exc)})") from exc
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise TlsFileError(f"{where}: {path} holds no PEM certificate") from exc
    return certificates


def _password(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes().rstrip(b"\r\n")
    except OSError as exc:
        raise TlsFileError(
            f"server.tls_key_password_file: {path} cannot be read ({_reason(exc)})"
        ) from exc


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).lower().replace("_", " ")
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return type(exc).__name__
