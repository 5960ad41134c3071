"""The official google-genai SDK, pointed at localgate, works exactly as against Google."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from google import genai
from google.genai import errors, types

from localgate.testing import FakeGemini
from tests.conftest import UPSTREAM_KEY, RunningGateway
from tests.e2e.sdk_parts import parts

SdkFactory = Callable[..., genai.Client]


@pytest.fixture
def sdk() -> Iterator[SdkFactory]:
    """Makes SDK clients for the gateway and closes them after the test."""
    made: list[genai.Client] = []

    def make(
        gateway: RunningGateway,
        api_version: str | None = "v1beta",
        prefix: str = "",
        api_key: str | None = None,
    ) -> genai.Client:
        options = types.HttpOptions(base_url=gateway.base_url + prefix)
        if api_version is not None:
            options.api_version = api_version
        client = genai.Client(api_key=api_key or gateway.key, http_options=options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.mark.parametrize("api_version", ["v1beta", "v1"])
def test_generate_content_goes_upstream_with_the_gateways_key(
    sdk: SdkFactory, gateway: RunningGateway, upstream: FakeGemini, api_version: str
) -> None:
    client = sdk(gateway, api_version)

    answer = client.models.generate_content(
        model="gemini-2.5-flash", contents="Write to 13812345678 please"
    )

    assert answer.text == "echo: Write to 13812345678 please"
    assert answer.usage_metadata is not None
    assert answer.usage_metadata.total_token_count == 13
    received = upstream.requests[-1]
    assert received.path == f"/{api_version}/models/gemini-2.5-flash:generateContent"
    assert received.headers["x-goog-api-key"] == UPSTREAM_KEY
    assert gateway.key not in str(received.headers)
    assert received.query == ()
    # The phone number never left; the answer came back with it restored.
    assert received.body["contents"][0]["parts"][0]["text"] == "Write to [CN_MOBILE_1] please"


def test_generate_content_behind_a_path_prefix(
    sdk: SdkFactory, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    client = sdk(gateway, prefix="/gemini/proxy")
    answer = client.models.generate_content(model="gemini-2.5-flash", contents="hi")

    assert answer.text == "echo: hi"
    assert upstream.requests[-1].path == "/v1beta/models/gemini-2.5-flash:generateContent"


def test_sdk_default_api_version_v1(
    sdk: SdkFactory, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    client = sdk(gateway, api_version=None)

    assert client.models.generate_content(model="gemini-2.5-flash", contents="x").text == "echo: x"
    assert upstream.requests[-1].path.startswith("/v1/models/")


def test_feature_rich_request_passes_through_unchanged(
    sdk: SdkFactory, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    config = types.GenerateContentConfig(
        system_instruction="Be brief.",
        temperature=0.2,
        top_k=40,
        max_output_tokens=256,
        thinking_config=types.ThinkingConfig(thinking_budget=128, include_thoughts=True),
        safety_settings=[
            types.SafetySetting(
                category=types.HarmCategory.HARM_CATEGORY_HARASSMENT,
                threshold=types.HarmBlockThreshold.BLOCK_ONLY_HIGH,
            )
        ],
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name="get_weather",
                        description="d",
                        parameters=types.Schema(
                            type=types.Type.OBJECT,
                            properties={"city": types.Schema(type=types.Type.STRING)},
                        ),
                    )
                ]
            )
        ],
    )
    contents = [
        types.Content(
            role="user",
            parts=[
                types.Part(text="Describe this"),
                types.Part.from_bytes(data="notes ü".encode(), mime_type="text/plain"),
            ],
        )
    ]

    client = sdk(gateway)
    client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)

    body = upstream.requests[-1].body
    assert body["systemInstruction"]["parts"][0]["text"] == "Be brief."
    assert body["generationConfig"]["thinkingConfig"] == {
        "thinking_budget": 128,
        "include_thoughts": True,
    }
    assert body["contents"][0]["parts"][1]["inlineData"]["mime_type"] == "text/plain"
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "get_weather"


def test_generate_content_stream(
    sdk: SdkFactory, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.stream(["Hello", " world", "!"])

    client = sdk(gateway)
    chunks = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))

    assert "".join(chunk.text or "" for chunk in chunks) == "Hello world!"
    assert upstream.requests[-1].query == (("alt", "sse"),)


def test_count_tokens(sdk: SdkFactory, gateway: RunningGateway, upstream: FakeGemini) -> None:
    client = sdk(gateway)
    result = client.models.count_tokens(model="gemini-2.5-flash", contents="one two three")

    assert result.total_tokens == 3
    assert upstream.requests[-1].path.endswith(":countTokens")


def test_embed_content_single_and_batch(
    sdk: SdkFactory, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    client = sdk(gateway)

    single = client.models.embed_content(model="gemini-embedding-001", contents="a")
    batch = client.models.embed_content(
        model="gemini-embedding-001",
        contents=parts("a", "b", "c"),
        config=types.EmbedContentConfig(task_type="RETRIEVAL_DOCUMENT"),
    )

    assert single.embeddings is not None
    assert len(single.embeddings) == 1
    assert batch.embeddings is not None
    assert len(batch.embeddings) == 3
    assert upstream.requests[-1].path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"


def test_models_list_and_get(
    sdk: SdkFactory, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    client = sdk(gateway)

    names = [model.name for model in client.models.list()]
    model = client.models.get(model="gemini-2.5-flash")

    assert names == ["models/gemini-2.5-flash", "models/gemini-embedding-001"]
    assert model.name == "models/gemini-2.5-flash"
    assert upstream.requests[-1].method == "GET"


def test_wrong_key_raises_client_error(
    sdk: SdkFactory, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    client = sdk(gateway, api_key="not-a-localgate-key")

    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model="gemini-2.5-flash", contents="hi")

    assert caught.value.code == 401
    assert caught.value.status == "UNAUTHENTICATED"
    assert upstream.requests == []


def test_upstream_quota_error_reaches_the_sdk_unchanged(
    sdk: SdkFactory, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.fail_with(
        429,
        {"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED"}},
    )

    client = sdk(gateway)
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model="gemini-2.5-flash", contents="hi")

    assert (caught.value.code, caught.value.status) == (429, "RESOURCE_EXHAUSTED")
    assert caught.value.message == "Quota exceeded."


def test_mid_stream_failure_raises_in_the_sdk(
    sdk: SdkFactory, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.stream(["one", "two", "three"], error_after=1)

    client = sdk(gateway)
    stream = client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi")
    received = [next(stream).text]
    with pytest.raises(errors.ServerError) as caught:
        next(stream)

    assert received == ["one"]
    assert caught.value.code == 502
