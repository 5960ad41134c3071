"""Identity: which tenant a localgate key belongs to."""

from localgate.identity.keys import ApiKeyRecord, IssuedKey, KeyStore, Principal, SqliteKeyStore
from localgate.identity.postgres import PostgresKeyStore
from localgate.identity.stores import AdminKeyStore, open_key_store

__all__ = [
    "AdminKeyStore",
    "ApiKeyRecord",
    "IssuedKey",
    "KeyStore",
    "PostgresKeyStore",
    "Principal",
    "SqliteKeyStore",
    "open_key_store",
]
