"""schemathesis against a live server, the way every contract test here uses it.

schemathesis's own pytest integration does not run on this pytest; each test instead
parametrizes over ``cases(document)`` and calls ``keeps_contract`` with the server's base
URL, its credentials and what a refusal must look like in its dialect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err, Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

__all__ = ["CHECKS", "cases", "keeps_contract", "operations"]

# No 5xx, and every status, content type, header and body as the document says.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def operations(document: dict[str, Any]) -> list[Any]:
    """The document's operations as schemathesis reads them (an unreadable one fails)."""
    return [
        _operation(result)
        for result in schemathesis.openapi.from_dict(document).get_all_operations()
    ]


def cases(
    document: dict[str, Any], negative: Callable[[Any], bool] = lambda operation: True
) -> list[Any]:
    """One test case per operation and generation mode: positive always, negative (input
    that breaks the schema) for the operations ``negative`` says take input."""
    found = []
    for operation in operations(document):
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if mode is GenerationMode.POSITIVE or negative(operation):
                found.append(pytest.param(operation, mode, id=f"{operation.label} {mode.value}"))
    return found


def keeps_contract(
    operation: Any,
    mode: GenerationMode,
    *,
    base_url: str,
    headers: dict[str, str],
    refusal: Callable[[Any, Any], None],
    examples: int = 25,
    checks: list[Any] | None = None,
) -> None:
    """Generated requests of ``operation`` answered as documented; ``refusal(case,
    response)`` checks each 4xx/5xx body in the server's dialect."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def keeps_it(case: Any) -> None:
        response = case.call_and_validate(
            base_url=base_url, headers=headers, checks=checks or CHECKS, timeout=60
        )
        if response.status_code >= 400:
            refusal(case, response)

    keeps_it()


def _operation(result: Ok[Any] | Err[Any]) -> Any:
    if isinstance(result, Err):
        raise AssertionError(f"schemathesis cannot read an operation: {result.err()}")
    return result.ok()
