"""The route table: what is served, what is refused."""

from __future__ import annotations

import pytest

from localgate.errors import InvalidArgument, MethodNotAllowed, NotFound, PermissionDenied
from localgate.gemini.routes import GeminiMethod, match_route


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
        "/v1beta/cachedContents/x",
        "/v1beta/models/gemini-2.5-flash:generateContent/extra",
        "/metricsx",
    ],
)
def test_unknown_paths_are_not_found(path: str) -> None:
    with pytest.raises(NotFound):
        match_route("POST", path)


@pytest.mark.parametrize(
    "model",
    [
        ".hidden",
        "..",
        "gemini 2.5",
        "gemini%2e",
        "张伟的模型",
        "a" * 129,
        "gemini-2.5-flash\u200b",
        "zhang.wei+13812345678",
    ],
)
@pytest.mark.parametrize("verb", [":generateContent", ""])
def test_a_model_name_outside_the_grammar_is_refused_without_repeating_it(
    model: str, verb: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        match_route("POST" if verb else "GET", f"/v1beta/models/{model}{verb}")

    assert model not in caught.value.message
    assert "gemini-2.5-flash" in caught.value.message


@pytest.mark.parametrize("model", ["gemini-2.5-flash", "text-embedding-004", "claude@20240620"])
def test_model_names_google_uses_are_served(model: str) -> None:
    assert match_route("GET", f"/v1/models/{model}").model_id == model


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
