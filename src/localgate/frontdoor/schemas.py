"""Shape checks for Gemini request bodies.

The models only *validate*: the gateway forwards the client's own JSON (minus what
redaction replaces), so unknown fields pass through and nothing is added. Both
camelCase and snake_case spellings are accepted, as proto3 JSON parsing does and the
official SDK relies on. Numbers may be floats where the API takes integers.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import (
    AliasChoices,
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from localgate.errors import InvalidArgument
from localgate.frontdoor.routes import GeminiMethod

__all__ = ["validate_body"]


def _either_spelling(name: str) -> AliasChoices:
    return AliasChoices(to_camel(name), name)


class _Message(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        alias_generator=AliasGenerator(validation_alias=_either_spelling),
    )

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        # Both spellings of one field would be forwarded while only one is checked
        # (and later redacted): refuse the ambiguity instead.
        if isinstance(data, dict):
            for camel, snake in _spellings(cls):
                if camel in data and snake in data:
                    raise ValueError(f"give '{camel}' or '{snake}', not both")
        return data


@cache
def _spellings(model: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """(camelCase, snake_case) of every field whose two spellings differ."""
    return tuple((to_camel(name), name) for name in model.model_fields if to_camel(name) != name)


class Blob(_Message):
    """``inlineData``."""

    mime_type: str
    data: str


class FileData(_Message):
    """``fileData``."""

    mime_type: str | None = None
    file_uri: str


class FunctionCall(_Message):
    """``functionCall``."""

    name: str
    args: dict[str, Any] | None = None


class FunctionResponse(_Message):
    """``functionResponse``."""

    name: str
    response: dict[str, Any] | None = None


class Part(_Message):
    """One part of a turn."""

    text: str | None = None
    inline_data: Blob | None = None
    file_data: FileData | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    thought: bool | None = None
    thought_signature: str | None = None


class Content(_Message):
    """One turn of the conversation."""

    role: str | None = None
    parts: list[Part] = Field(default_factory=list)


class GenerateContentRequest(_Message):
    """Body of ``generateContent`` and ``streamGenerateContent``."""

    contents: list[Content] = Field(min_length=1)
    system_instruction: Content | None = None
    tools: list[dict[str, Any]] | None = None
    tool_config: dict[str, Any] | None = None
    safety_settings: list[dict[str, Any]] | None = None
    generation_config: dict[str, Any] | None = None
    cached_content: str | None = None


class NestedGenerateContentRequest(GenerateContentRequest):
    """The ``generateContentRequest`` form of ``countTokens``; names its model."""

    model: str


class CountTokensRequest(_Message):
    """Body of ``countTokens``: ``contents`` or ``generateContentRequest``, not both."""

    contents: list[Content] | None = None
    generate_content_request: NestedGenerateContentRequest | None = None


class EmbedContentRequest(_Message):
    """Body of ``embedContent``."""

    content: Content
    model: str | None = None
    task_type: str | None = None
    title: str | None = None
    output_dimensionality: int | None = None


class BatchEmbedContentsRequest(_Message):
    """Body of ``batchEmbedContents``."""

    requests: list[EmbedContentRequest] = Field(min_length=1)


_SCHEMAS: dict[GeminiMethod, type[_Message]] = {
    GeminiMethod.GENERATE_CONTENT: GenerateContentRequest,
    GeminiMethod.STREAM_GENERATE_CONTENT: GenerateContentRequest,
    GeminiMethod.COUNT_TOKENS: CountTokensRequest,
    GeminiMethod.EMBED_CONTENT: EmbedContentRequest,
    GeminiMethod.BATCH_EMBED_CONTENTS: BatchEmbedContentsRequest,
}


def validate_body(method: GeminiMethod, model: str | None, body: Any) -> None:
    """Raise ``InvalidArgument`` naming the field path unless ``body`` fits ``method``."""
    schema = _SCHEMAS.get(method)
    if schema is None:
        return
    if not isinstance(body, dict):
        raise InvalidArgument(
            f"Invalid request body: expected a JSON object for {method.value}, "
            f"got {type(body).__name__}."
        )
    try:
        parsed = schema.model_validate(body)
    except ValidationError as exc:
        raise InvalidArgument(_first_problem(exc)) from exc
    if isinstance(parsed, CountTokensRequest):
        if (parsed.contents is None) == (parsed.generate_content_request is None):
            raise InvalidArgument(
                "Invalid countTokens request: send exactly one of 'contents' or "
                "'generateContentRequest'."
            )
    elif isinstance(parsed, BatchEmbedContentsRequest):
        for index, request in enumerate(parsed.requests):
            if request.model is not None and request.model != model:
                raise InvalidArgument(
                    f"Invalid value at 'requests[{index}].model': {request.model!r} must be "
                    f"the model of the URL, {model!r}."
                )


def _first_problem(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    error = errors[0]
    where = ""
    for part in error["loc"]:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    reason = (
        "is required" if error["type"] == "missing" else error["msg"][:1].lower() + error["msg"][1:]
    )
    more = f" ({len(errors) - 1} more problem(s) not shown)" if len(errors) > 1 else ""
    return f"Invalid value at '{where or '<body>'}': {reason}.{more}"
