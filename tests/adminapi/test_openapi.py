"""The admin API's contract: a valid OpenAPI 3.1 document made from the handlers' models,
served by the admin listener; schemathesis against it (called directly, without its pytest
plugin), each operation with a token of a role allowed it: no 5xx, every answer as
documented, every refusal in the error envelope."""

from __future__ import annotations

from typing import Any

import pytest
from openapi_spec_validator import validate
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import response_headers_conformance

from localgate.admin.operators import Role
from localgate.adminapi.app import admin_openapi
from localgate.adminapi.operations import OPERATIONS
from localgate.adminapi.permissions import allowed
from tests.adminapi.conftest import AdminApi
from tests.contract.harness import CHECKS, cases, keeps_contract


def test_the_document_is_valid_openapi_3_1_and_covers_every_operation() -> None:
    document = admin_openapi()
    validate(document)

    found = {
        operation["operationId"]
        for path in document["paths"].values()
        for operation in path.values()
    }
    assert found == {op.operation_id for op in OPERATIONS}
    assert all(path.startswith("/admin/api/v1/") for path in document["paths"])


def test_the_listener_serves_it(admin_api: AdminApi) -> None:
    with admin_api.client() as client:
        answer = client.get("/admin/api/openapi.json")

    assert answer.status_code == 200
    assert answer.json() == admin_openapi()


OPERATIONS_BY_ID = {op.operation_id: op for op in OPERATIONS}


def _role_for(operation_id: str) -> Role:
    permission = OPERATIONS_BY_ID[operation_id].permission
    return next(role for role in Role if allowed(role, permission))


def _takes_input(operation: Any) -> bool:
    raw = operation.definition.raw
    return "requestBody" in raw or any(p["in"] == "query" for p in raw["parameters"])


def _admin_refusal(case: Any, response: Any) -> None:
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == response.status_code


# Negative cases (schema-violating input) for the operations that take a body or a query.
@pytest.mark.parametrize(("operation", "mode"), cases(admin_openapi(), negative=_takes_input))
def test_the_admin_api_keeps_its_contract(
    operation: Any, mode: GenerationMode, admin_api: AdminApi
) -> None:
    operation_id = operation.definition.raw["operationId"]
    token = admin_api.tokens[_role_for(operation_id)]
    keeps_contract(
        operation,
        mode,
        base_url=admin_api.base_url,
        headers={"authorization": f"Bearer {token}"},
        refusal=_admin_refusal,
        # Opening the vector store per call is slow; a few cases show its contract.
        examples=5 if operation_id in ("cacheStats", "clearCache") else 25,
        checks=[c for c in CHECKS if c is not response_headers_conformance],
    )
