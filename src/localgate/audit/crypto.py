"""Envelope encryption and keyed hashes for the audit trail.

Layout of keys::

    master key (outside the database: env LOCALGATE_AUDIT_MASTER_KEY or a key file)
      └── wraps, with AES-256-GCM, each row of audit_keys:
            payload data key   one per tenant per period (day or month): encrypts payloads
            prompt data key    one per tenant per period: the optional original prompts
            hmac key           one per tenant: prompt and end-user HMACs (never destroyed)

Every ciphertext names the key that made it and binds, as associated data, the record
and tenant it belongs to, so a ciphertext moved to another record does not decrypt.
Rotating the master key re-wraps the rows of audit_keys; records are not touched.
Destroying a period's data keys (crypto-shredding) makes its payloads unreadable while
the hashes that the Merkle log covers stay verifiable.

Cipher suites: ``standard`` is SHA-256 / HMAC-SHA-256 / AES-256-GCM; ``sm`` is SM3 /
HMAC-SM3 / SM4-GCM (GB/T 32905, GB/T 32907), for deployments that must use Chinese
commercial cryptography (GB/T 39786). Both come from the ``cryptography`` package.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac as std_hmac
import os
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as crypto_hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from localgate.audit.merkle import TreeHasher
from localgate.secret import Secret, load_or_create_key

__all__ = [
    "CipherSuite",
    "DecryptionError",
    "MasterKey",
    "SuiteName",
    "load_or_create_master_key",
]

SuiteName = Literal["standard", "sm"]
_NONCE = 12
_TAG = 16


class DecryptionError(Exception):
    """A ciphertext could not be decrypted: wrong key, destroyed key, or altered data."""


@dataclass(frozen=True)
class CipherSuite:
    """The hash, MAC and authenticated cipher used for one audit log."""

    name: SuiteName

    @property
    def key_bytes(self) -> int:
        """Length of a data key: 32 for AES-256, 16 for SM4."""
        return 32 if self.name == "standard" else 16

    def digest(self, data: bytes) -> bytes:
        """SHA-256 or SM3 of ``data``."""
        if self.name == "standard":
            return hashlib.sha256(data).digest()
        digest = hashes.Hash(hashes.SM3())
        digest.update(data)
        return digest.finalize()

    def mac(self, key: bytes, data: bytes) -> bytes:
        """HMAC-SHA-256 or HMAC-SM3 of ``data``."""
        if self.name == "standard":
            return std_hmac.new(key, data, hashlib.sha256).digest()
        mac = crypto_hmac.HMAC(key, hashes.SM3())
        mac.update(data)
        return mac.finalize()

    def encrypt(self, key: bytes, plaintext: bytes, associated: bytes) -> bytes:
        """``nonce || ciphertext || tag`` (AES-256-GCM or SM4-GCM)."""
        nonce = os.urandom(_NONCE)
        if self.name == "standard":
            return nonce + AESGCM(key).encrypt(nonce, plaintext, associated)
        encryptor = Cipher(algorithms.SM4(key), modes.GCM(nonce)).encryptor()
        encryptor.authenticate_additional_data(associated)
        body = encryptor.update(plaintext) + encryptor.finalize()
        return nonce + body + encryptor.tag

    def sealer(self, key: bytes) -> Callable[[bytes, bytes], bytes]:
        """``encrypt`` with ``key`` bound, for many plaintexts under one key: the AES-GCM
        context is made once, not once per record."""
        if self.name != "standard":
            return functools.partial(self.encrypt, key)
        encrypt = AESGCM(key).encrypt

        def seal(plaintext: bytes, associated: bytes) -> bytes:
            nonce = os.urandom(_NONCE)
            return nonce + encrypt(nonce, plaintext, associated)

        return seal

    def decrypt(self, key: bytes, blob: bytes, associated: bytes) -> bytes:
        """The plaintext of ``encrypt``'s output; ``DecryptionError`` if anything is off."""
        nonce, body = blob[:_NONCE], blob[_NONCE:]
        try:
            if self.name == "standard":
                return AESGCM(key).decrypt(nonce, body, associated)
            decryptor = Cipher(algorithms.SM4(key), modes.GCM(nonce, body[-_TAG:])).decryptor()
            decryptor.authenticate_additional_data(associated)
            return decryptor.update(body[:-_TAG]) + decryptor.finalize()
        except (InvalidTag, ValueError) as exc:
            raise DecryptionError("the ciphertext does not decrypt with this key") from exc

    def tree_hasher(self) -> TreeHasher:
        """The Merkle tree hash of logs in this suite: SHA-256 or SM3."""
        return TreeHasher("sha256" if self.name == "standard" else "sm3")

    def new_key(self) -> bytes:
        """A fresh random data key."""
        return secrets.token_bytes(self.key_bytes)


class MasterKey:
    """The key that wraps every data key; lives outside the audit database."""

    def __init__(self, material: Secret) -> None:
        raw = base64.b64decode(material.reveal())
        if len(raw) != 32:
            raise ValueError("the audit master key must be 32 bytes, base64-encoded")
        self._key = raw
        self.key_id = hashlib.sha256(b"localgate-master:" + raw).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"MasterKey(key_id={self.key_id!r})"

    def wrap(self, data_key: bytes, label: str) -> bytes:
        """``data_key`` encrypted under the master key, bound to ``label``."""
        return CipherSuite("standard").encrypt(self._key, data_key, _label(label))

    def unwrap(self, wrapped: bytes, label: str) -> bytes:
        """The data key inside ``wrapped``; ``DecryptionError`` if it is not ours."""
        return CipherSuite("standard").decrypt(self._key, wrapped, _label(label))

    @staticmethod
    def generate() -> Secret:
        """New key material, base64-encoded, for a key file or the environment."""
        return Secret(base64.b64encode(secrets.token_bytes(32)).decode())


def _label(label: str) -> bytes:
    encoded = label.encode()
    return struct.pack(">H", len(encoded)) + encoded


def load_or_create_master_key(
    environment_value: str | None, key_file: Path, *, create: bool
) -> MasterKey:
    """The master key from the environment, else from ``key_file`` (created if allowed)."""
    if environment_value:
        return MasterKey(Secret(environment_value.strip()))
    if not create and not key_file.exists():
        raise FileNotFoundError(f"no audit master key at {key_file}")
    raw = load_or_create_key(None, key_file)
    return MasterKey(Secret(base64.b64encode(raw).decode()))
