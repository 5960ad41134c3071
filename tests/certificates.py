"""A certificate authority made for one test (cryptography): server and client certificates
as PEM files, so tests run real TLS on loopback."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Issued", "TestAuthority"]


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, written as PEM files."""

    cert_file: Path
    key_file: Path
    certificate: x509.Certificate

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the DER certificate, hex."""
        return self.certificate.fingerprint(hashes.SHA256()).hex()


class TestAuthority:
    """A CA whose certificate is ``cert_file``; it issues server and client certificates."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(self, directory: Path, name: str = "localgate test CA") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cert_file = directory / f"{_slug(name)}.crt"
        self.cert_file.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def server(
        self, name: str = "server", *, days: float = 7, hosts: tuple[str, ...] = ()
    ) -> Issued:
        """A server certificate for 127.0.0.1, localhost and ``hosts``."""
        names: list[x509.GeneralName] = [
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.DNSName("localhost"),
            *(x509.DNSName(host) for host in hosts),
        ]
        return self._issue(name, names, ExtendedKeyUsageOID.SERVER_AUTH, days)

    def client(
        self,
        name: str,
        *,
        dns: tuple[str, ...] = (),
        uris: tuple[str, ...] = (),
        emails: tuple[str, ...] = (),
        days: float = 7,
    ) -> Issued:
        """A client certificate with common name ``name`` and these alternative names."""
        names: list[x509.GeneralName] = [
            *(x509.DNSName(value) for value in dns),
            *(x509.UniformResourceIdentifier(value) for value in uris),
            *(x509.RFC822Name(value) for value in emails),
        ]
        return self._issue(name, names, ExtendedKeyUsageOID.CLIENT_AUTH, days)

    def _issue(
        self,
        name: str,
        alternative: list[x509.GeneralName],
        usage: x509.ObjectIdentifier,
        days: float,
    ) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.COMMON_NAME, name),
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme Test"),
                    ]
                )
            )
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            # An expired one (days < 0) was valid for a day before it expired.
            .not_valid_before(
                min(now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days - 1))
            )
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if alternative:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(alternative), critical=False
            )
        certificate = builder.sign(self._key, hashes.SHA256())
        stem = self.directory / _slug(f"{name}-{x509.random_serial_number() % 10**8}")
        cert_file, key_file = stem.with_suffix(".crt"), stem.with_suffix(".key")
        cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        key_file.chmod(0o600)
        return Issued(cert_file, key_file, certificate)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)
