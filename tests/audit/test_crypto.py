"""The audit trail's cipher suites: what the writer seals, the reader opens."""

from __future__ import annotations

import pytest

from localgate.audit.crypto import CipherSuite, DecryptionError, SuiteName


@pytest.mark.parametrize("name", ["standard", "sm"])
def test_a_sealer_seals_what_decrypt_opens_with_a_fresh_nonce_each_time(name: SuiteName) -> None:
    suite = CipherSuite(name)
    key = suite.new_key()
    seal = suite.sealer(key)

    first, second = seal(b"payload", b"acme/1"), seal(b"payload", b"acme/1")

    assert suite.decrypt(key, first, b"acme/1") == b"payload"
    assert suite.decrypt(key, second, b"acme/1") == b"payload"
    assert first[:12] != second[:12]
    with pytest.raises(DecryptionError):
        suite.decrypt(key, first, b"acme/2")  # bound to its record
