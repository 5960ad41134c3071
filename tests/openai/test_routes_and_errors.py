"""The OpenAI door's routes and its error shape."""

from __future__ import annotations

import pytest

from localgate.errors import (
    InvalidArgument,
    LocalgateError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    UpstreamError,
    UpstreamTimeout,
)
from localgate.openai.errors import InvalidParameter, openai_error_body
from localgate.openai.routes import (
    OpenAIOperation,
    OpenAIRoute,
    is_openai_path,
    match_openai_route,
)


@pytest.mark.parametrize("base", ["/v1beta/openai", "/openai/v1", "/a/b/v1beta/openai"])
def test_routes_under_both_bases_and_any_prefix(base: str) -> None:
    assert match_openai_route("POST", f"{base}/chat/completions") == OpenAIRoute(
        OpenAIOperation.CHAT_COMPLETIONS
    )
    assert match_openai_route("POST", f"{base}/embeddings").operation is (
        OpenAIOperation.EMBEDDINGS
    )
    assert match_openai_route("GET", f"{base}/models").operation is OpenAIOperation.LIST_MODELS
    assert match_openai_route("GET", f"{base}/models/gemini-2.5-flash") == OpenAIRoute(
        OpenAIOperation.GET_MODEL, "gemini-2.5-flash"
    )


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/openai/completions",
        "/v1beta/openai/files",
        "/v1beta/openai/responses",
        "/v1beta/openai/chat/completions/x",
        "/v1beta/openai/models/a/b",
        "/v1beta/openai",
    ],
)
def test_anything_else_under_the_bases_is_refused(path: str) -> None:
    assert is_openai_path(path)
    with pytest.raises(NotFound):
        match_openai_route("POST", path)


def test_native_paths_are_not_the_openai_doors() -> None:
    assert not is_openai_path("/v1beta/models/gemini-2.5-flash:generateContent")
    assert not is_openai_path("/v1/models")


def test_a_wrong_method_names_the_right_one() -> None:
    with pytest.raises(MethodNotAllowed) as refused:
        match_openai_route("GET", "/openai/v1/chat/completions")

    assert refused.value.allowed == ("POST",)


@pytest.mark.parametrize(
    ("error", "status", "kind", "code"),
    [
        (InvalidArgument("bad"), 400, "invalid_request_error", "invalid_argument"),
        (PayloadTooLarge("big"), 413, "invalid_request_error", "invalid_argument"),
        (Unauthenticated("who"), 401, "authentication_error", "invalid_api_key"),
        (PermissionDenied("no"), 403, "permission_error", "permission_denied"),
        (NotFound("where"), 404, "not_found_error", "not_found"),
        (ResourceExhausted("slow down"), 429, "rate_limit_error", "rate_limit_exceeded"),
        (UpstreamTimeout("late"), 504, "server_error", "deadline_exceeded"),
        (LocalgateError("oops"), 500, "server_error", "internal"),
        (
            UpstreamError(503, {"error": {"message": "busy", "status": "UNAVAILABLE"}}),
            503,
            "server_error",
            "unavailable",
        ),
    ],
)
def test_every_error_in_openai_shape(
    error: LocalgateError, status: int, kind: str, code: str
) -> None:
    assert error.code == status
    assert openai_error_body(error) == {
        "error": {"message": error.message, "type": kind, "param": None, "code": code}
    }


def test_a_parameter_error_names_the_parameter() -> None:
    body = openai_error_body(InvalidParameter("no", "logit_bias", "unsupported_parameter"))

    assert body["error"]["param"] == "logit_bias"
    assert body["error"]["code"] == "unsupported_parameter"
