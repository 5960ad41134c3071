"""Every operation, for every role: allowed or refused as docs/admin-api.md's table says,
and a tenant-admin kept to its own tenant whichever way it asks for another's."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from localgate.admin.audit import AuditAdmin
from localgate.admin.operators import Role
from localgate.adminapi.operations import OPERATIONS
from tests.adminapi.conftest import AdminApi

ALL = frozenset(Role)
A, S, AU, T, V = Role.ADMIN, Role.SECURITY, Role.AUDITOR, Role.TENANT_ADMIN, Role.VIEWER
NO_SUCH_ID = "0000000000000000"
_USERS = itertools.count()

# operationId -> the roles allowed; written out here, not read from the code's grants.
ALLOWED: dict[str, frozenset[Role]] = {
    "whoami": ALL,
    "logout": ALL,
    "listTenants": ALL,
    "getTenant": ALL,
    "listKeys": frozenset({S, T, V}),
    "createKey": frozenset({S, T}),
    "tenantUsage": frozenset({A, S, T, V}),
    "tenantLimits": frozenset({A, S, T, V}),
    "revokeKey": frozenset({S, T}),
    "searchAudit": frozenset({AU}),
    "getRequestRecords": frozenset({AU}),
    "decryptRequest": frozenset({AU}),
    "proveRequest": frozenset({AU}),
    "verifyAudit": frozenset({A, S, AU, V}),
    "listCheckpoints": frozenset({A, S, AU, V}),
    "startVerification": frozenset({A, S, AU, V}),
    "verificationJob": frozenset({A, S, AU, V}),
    "verifierKey": frozenset({A, S, AU, V}),
    "signCheckpoints": frozenset({A, AU}),
    "cacheStats": frozenset({A, S, V}),
    "clearCache": frozenset({A, S}),
    "listCollections": frozenset({A, S, V}),
    "deleteCollection": frozenset({A, S}),
    "showConfig": frozenset({A, S, V}),
    "reloadConfig": frozenset({A}),
    "listUpstreams": frozenset({A, S, V}),
    "redact": frozenset({A, S}),
    "listTokens": frozenset({A}),
    "createToken": frozenset({A}),
    "revokeToken": frozenset({A}),
    "listUsers": frozenset({A}),
    "createUser": frozenset({A}),
    "disableUser": frozenset({A}),
}


def request_for(operation_id: str, api: AdminApi, tenant: str = "acme") -> dict[str, Any]:
    """A well-formed request for the operation, naming ``tenant`` where one is named."""
    request_id = api.request_ids[tenant]
    key_id = api.key_ids[tenant]
    requests: dict[str, dict[str, Any]] = {
        "whoami": {"method": "GET", "url": "/whoami"},
        "logout": {"method": "DELETE", "url": "/session"},
        "listTenants": {"method": "GET", "url": "/tenants"},
        "getTenant": {"method": "GET", "url": f"/tenants/{tenant}"},
        "listKeys": {"method": "GET", "url": f"/tenants/{tenant}/keys"},
        "createKey": {
            "method": "POST",
            "url": f"/tenants/{tenant}/keys",
            "json": {"label": "role table"},
        },
        "revokeKey": {"method": "DELETE", "url": f"/keys/{NO_SUCH_ID}"},
        "tenantUsage": {"method": "GET", "url": f"/tenants/{tenant}/usage"},
        "tenantLimits": {"method": "GET", "url": f"/tenants/{tenant}/limits"},
        "searchAudit": {"method": "GET", "url": "/audit/records", "params": {"tenant": tenant}},
        "getRequestRecords": {"method": "GET", "url": f"/audit/requests/{request_id}"},
        "decryptRequest": {
            "method": "POST",
            "url": f"/audit/requests/{request_id}/decrypt",
            "json": {"reason": "role table: checking access"},
        },
        "proveRequest": {"method": "GET", "url": f"/audit/requests/{request_id}/proof"},
        "verifyAudit": {"method": "GET", "url": "/audit/verify", "params": {"tenant": tenant}},
        "listCheckpoints": {
            "method": "GET",
            "url": "/audit/checkpoints",
            "params": {"tenant": tenant},
        },
        "signCheckpoints": {"method": "POST", "url": "/audit/checkpoints"},
        "startVerification": {
            "method": "POST",
            "url": "/audit/verify/jobs",
            "json": {"tenant": tenant},
        },
        "verificationJob": {
            "method": "GET",
            "url": "/audit/verify/job",
            "params": {"tenant": tenant},
        },
        "verifierKey": {"method": "GET", "url": "/audit/verifier-key"},
        "cacheStats": {"method": "GET", "url": "/cache", "params": {"tenant": tenant}},
        "clearCache": {"method": "DELETE", "url": "/cache", "params": {"tenant": tenant}},
        "listCollections": {
            "method": "GET",
            "url": "/rag/collections",
            "params": {"tenant": tenant},
        },
        "deleteCollection": {
            "method": "DELETE",
            "url": "/rag/collections/handbook",
            "params": {"tenant": tenant},
        },
        "showConfig": {"method": "GET", "url": "/config"},
        "reloadConfig": {"method": "POST", "url": "/config/reload"},
        "listUpstreams": {"method": "GET", "url": "/upstreams"},
        "redact": {"method": "POST", "url": "/redact", "json": {"text": "mail a@example.com"}},
        "listTokens": {"method": "GET", "url": "/tokens"},
        "createToken": {
            "method": "POST",
            "url": "/tokens",
            "json": {"role": "admin", "expires": "1d", "label": "role table"},
        },
        "revokeToken": {"method": "DELETE", "url": f"/tokens/{NO_SUCH_ID}"},
        "listUsers": {"method": "GET", "url": "/users"},
        "createUser": {
            "method": "POST",
            "url": "/users",
            "json": {"name": f"table-{next(_USERS)}", "role": "admin", "password": "x" * 12},
        },
        "disableUser": {"method": "DELETE", "url": "/users/nobody"},
        "_key": {"method": "DELETE", "url": f"/keys/{key_id}"},
    }
    return requests[operation_id]


def send(api: AdminApi, role: Role | None, request: dict[str, Any]) -> Any:
    request = {**request, "url": "/admin/api/v1" + request["url"]}
    with api.client(role) as client:
        return client.request(**request)


def test_the_table_covers_every_operation() -> None:
    public = {op.operation_id for op in OPERATIONS if op.public}
    assert public == {"login", "oidcLogin", "oidcCallback"}
    assert {op.operation_id for op in OPERATIONS} - public == set(ALLOWED)


@pytest.fixture(scope="module")
def signed(admin_api: AdminApi) -> AdminApi:
    """A checkpoint signed, so that proofs can be made."""
    AuditAdmin(admin_api.settings).checkpoint()
    return admin_api


@pytest.mark.parametrize("role", list(Role), ids=lambda role: role.value)
@pytest.mark.parametrize("operation_id", sorted(ALLOWED))
def test_each_role_is_allowed_exactly_what_the_table_says(
    signed: AdminApi, operation_id: str, role: Role
) -> None:
    answer = send(signed, role, request_for(operation_id, signed))

    if role in ALLOWED[operation_id]:
        assert answer.status_code not in (401, 403), answer.text
        assert answer.status_code < 500, answer.text
    else:
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["code"] == 403
        assert answer.json()["error"]["status"] == "PERMISSION_DENIED"


@pytest.mark.parametrize("operation_id", sorted(ALLOWED))
def test_no_operation_answers_without_credentials(admin_api: AdminApi, operation_id: str) -> None:
    for headers in ({}, {"authorization": "Bearer lga_0123456789abcdef_" + "x" * 43}):
        request = request_for(operation_id, admin_api)
        with admin_api.client(None, headers=headers) as client:
            answer = client.request(**{**request, "url": "/admin/api/v1" + request["url"]})

        assert answer.status_code == 401, answer.text
        assert answer.json()["error"] == {
            "code": 401,
            "message": answer.json()["error"]["message"],
            "status": "UNAUTHENTICATED",
        }


@pytest.mark.parametrize("operation_id", sorted(ALLOWED))
def test_a_tenant_admin_sees_nothing_of_another_tenant(signed: AdminApi, operation_id: str) -> None:
    answer = send(signed, Role.TENANT_ADMIN, request_for(operation_id, signed, "globex"))

    # Refused, or (operations not naming a tenant) answered without the other tenant in it.
    assert answer.status_code in (200, 403, 404), answer.text
    for trace in ("globex", signed.key_ids["globex"], signed.request_ids["globex"]):
        if answer.status_code == 200:
            assert trace not in answer.text


def test_a_tenant_admin_cannot_revoke_another_tenants_key_by_its_id(signed: AdminApi) -> None:
    answer = send(signed, Role.TENANT_ADMIN, request_for("_key", signed, "globex"))

    assert answer.status_code == 404  # as for a key that does not exist: nothing to learn
    keys = send(signed, Role.SECURITY, request_for("listKeys", signed, "globex")).json()
    assert [key["revoked_at"] for key in keys["keys"]] == [None]


def test_a_tenant_admin_manages_its_own_keys(signed: AdminApi) -> None:
    created = send(signed, Role.TENANT_ADMIN, request_for("createKey", signed)).json()
    assert created["tenant"] == "acme"
    assert created["key"].startswith(f"lg_{created['key_id']}_")

    revoked = send(
        signed, Role.TENANT_ADMIN, {"method": "DELETE", "url": f"/keys/{created['key_id']}"}
    )
    assert revoked.status_code == 200
    keys = send(signed, Role.TENANT_ADMIN, request_for("listKeys", signed)).json()["keys"]
    assert {k["key_id"]: k["revoked_at"] is not None for k in keys}[created["key_id"]]
    usage = send(signed, Role.TENANT_ADMIN, request_for("tenantUsage", signed)).json()
    assert usage["tenant"] == "acme"
    assert usage["requests"] >= 1
    assert usage["outcomes"]["forwarded"] >= 1
    [model] = usage["models"].values()
    assert model["requests"] == usage["requests"]
    assert model["total_tokens"] > 0
    tenants = send(signed, Role.TENANT_ADMIN, request_for("listTenants", signed)).json()
    assert [t["name"] for t in tenants["tenants"]] == ["acme"]


@pytest.mark.parametrize("other", [r for r in Role if r is not Role.ADMIN], ids=str)
def test_an_admin_cannot_mint_a_role_it_does_not_hold(admin_api: AdminApi, other: Role) -> None:
    tenant = "acme" if other is Role.TENANT_ADMIN else None
    for operation_id, extra in (
        ("createToken", {}),
        ("createUser", {"name": f"mint-{other.value}", "password": "x" * 12}),
    ):
        request = request_for(operation_id, admin_api)
        request["json"] = {**request["json"], **extra, "role": other.value, "tenant": tenant}
        answer = send(admin_api, Role.ADMIN, request)
        assert answer.status_code == 403, answer.text
        assert "localgate admin" in answer.json()["error"]["message"]
    users = send(admin_api, Role.ADMIN, request_for("listUsers", admin_api)).json()["users"]
    assert f"mint-{other.value}" not in {u["name"] for u in users}
