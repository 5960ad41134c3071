"""The admin API: the admin services over HTTP, on a listener of its own.

- ``permissions``  what each role may do
- ``sessions``     console logins: sessions, CSRF tokens, login throttling
- ``oidc``         login with the company's identity provider (code flow with PKCE)
- ``trail``        the admin-action trail, a tamper-evident log in the audit store
- ``models``       the request and response schemas (the OpenAPI document is made of them)
- ``routing``      operations, authentication, errors, the OpenAPI document
- ``operations``   the operations themselves, each a call into an admin service, and
  their table; ``logins`` and ``auditing`` hold the session and audit ones
- ``services``     what the operations share, built in the lifespan
- ``link``         the gateway running beside it: upstreams, circuits, reloads
- ``app``          the application factory
- ``listener``     the second uvicorn server beside the data plane's (``localgate serve``)

docs/admin-api.md describes it for its users.
"""
