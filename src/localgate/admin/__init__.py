"""Admin services: what operators and auditors do outside requests, callable from code.

One module per concern, each a plain class taking typed inputs and returning dataclasses,
raising the project's exceptions (``errors.py``) with messages an operator can act on; none
prints or knows about click. The ``localgate`` CLI is a thin layer over them, and the admin
API will be another:

- ``keys``     create, list and revoke tenant keys (``KeyAdmin``)
- ``tenants``  the tenants known from the configuration and the key store, with their
  effective policy (``TenantAdmin``)
- ``audit``    verify, prove, inspect and maintain the audit trail (``AuditAdmin``, and
  ``check_proof``, which needs no configuration)
- ``cache``    what the answer cache holds, and clearing it (``CacheAdmin``)
- ``rag``      retrieval collections: ingest, search, list, delete (``RagAdmin``)
- ``migrations`` the configured databases brought to this version's schema
  (``migrate_databases``, for ``localgate migrate``)

Import the module you need: this package re-exports nothing, so ``localgate keys list``
does not pay for the audit store or the vector store it never opens.
"""
