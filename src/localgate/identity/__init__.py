"""Identity: which tenant a localgate key belongs to."""

from localgate.identity.keys import ApiKeyRecord, IssuedKey, KeyStore, Principal, SqliteKeyStore

__all__ = ["ApiKeyRecord", "IssuedKey", "KeyStore", "Principal", "SqliteKeyStore"]
