"""The route table: what is served, what is refused."""

from __future__ import annotations

import pytest

from localgate.errors import MethodNotAllowed, NotFound, PermissionDenied
from localgate.frontdoor.routes import GeminiMethod, match_route


@pytest.mark.parametrize(
    ("method", "path", "expected", "upstream_path"),
    [
        (
            "POST",
            "/v1beta/models/gemini-2.5-flash:generateContent",
            GeminiMethod.GENERATE_CONTENT,
            "v1beta/models/gemini-2.5-flash:generateContent",
        ),
        (
            "POST",
            "/a/b/v1/models/gemini-2.5-flash:streamGenerateContent",
            GeminiMethod.STREAM_GENERATE_CONTENT,
            "v1/models/gemini-2.5-flash:streamGenerateContent",
        ),
        (
            "POST",
            "/v1beta/tunedModels/my-tune:generateContent",
            GeminiMethod.GENERATE_CONTENT,
            "v1beta/tunedModels/my-tune:generateContent",
        ),
        ("GET", "/v1alpha/models", GeminiMethod.LIST_MODELS, "v1alpha/models"),
        ("GET", "/v1/models/gemini-2.5-pro", GeminiMethod.GET_MODEL, "v1/models/gemini-2.5-pro"),
    ],
)
def test_served_routes(method: str, path: str, expected: GeminiMethod, upstream_path: str) -> None:
    route = match_route(method, path)

    assert route.method is expected
    assert route.upstream_path == upstream_path


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models/gemini:unknownVerb",
        "/v1beta/models/a/b:generateContent",
        "/v1beta/models/.hidden:generateContent",
        "/v1beta/cachedContents/x",
        "/v1beta/models/gemini-2.5-flash:generateContent/extra",
        "/metricsx",
    ],
)
def test_unknown_paths_are_not_found(path: str) -> None:
    with pytest.raises(NotFound):
        match_route("POST", path)


def test_wrong_http_method() -> None:
    with pytest.raises(MethodNotAllowed) as caught:
        match_route("DELETE", "/v1beta/models/gemini-2.5-flash")

    assert caught.value.allowed == ("GET",)


@pytest.mark.parametrize(
    "path", ["/upload/v1beta/files", "/v1/files", "/x/v1beta/files/abc:download"]
)
def test_files_api_is_denied(path: str) -> None:
    with pytest.raises(PermissionDenied):
        match_route("POST", path)
