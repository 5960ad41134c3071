"""Shape checks for Gemini request bodies.

The schemas only *validate*: the gateway forwards the client's own JSON (minus what
redaction replaces), so unknown fields pass through and nothing is added. Both
camelCase and snake_case spellings are accepted, as proto3 JSON parsing does and the
official SDK relies on. Numbers may be floats where the API takes integers.

They are pydantic-core schemas of plain dicts (typed dicts), built once: validating
a request builds no model objects, which matters on the hot path (about a third of the
time pydantic models took). The one check in Python: a message must not give a field
in both spellings (only one would be checked, both forwarded).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic.alias_generators import to_camel
from pydantic_core import CoreSchema, SchemaValidator, ValidationError
from pydantic_core import core_schema as cs

from localgate.errors import InvalidArgument
from localgate.gemini.routes import GeminiMethod

__all__ = ["request_schemas", "validate_body"]


class _Field:
    """One field of a message: its snake_case name, schema, whether it is required, and
    whether an optional field may be ``null`` (most may: proto3 JSON reads it as unset)."""

    def __init__(
        self, name: str, schema: CoreSchema, *, required: bool = False, nullable: bool = True
    ) -> None:
        self.name = name
        self.camel = to_camel(name)
        self.schema = cs.nullable_schema(schema) if nullable and not required else schema
        self.required = required
        # Either spelling is read; a missing required field is named by its camelCase one.
        self.aliases: list[list[str | int]] | None = (
            [[self.camel], [name]] if self.camel != name else None
        )


_STR = cs.str_schema()
_OBJECT = cs.dict_schema(keys_schema=cs.str_schema(), values_schema=cs.any_schema())


def _message(*fields: _Field, name: str | None = None) -> CoreSchema:
    """A JSON object with these fields (either spelling) and any others; ``name`` is the
    schema's name where the OpenAPI document refers to it rather than repeat it."""
    pairs = tuple((field.camel, field.name) for field in fields if field.camel != field.name)
    schema = cs.typed_dict_schema(
        {
            field.name: cs.typed_dict_field(
                field.schema,
                required=field.required,
                validation_alias=field.aliases,
            )
            for field in fields
        },
        extra_behavior="allow",
        ref=None if pairs else name,
    )
    if not pairs:
        return schema
    return cs.no_info_before_validator_function(_one_spelling(pairs), schema, ref=name)


def _one_spelling(pairs: tuple[tuple[str, str], ...]) -> Callable[[Any], Any]:
    def check(data: Any) -> Any:
        if isinstance(data, dict):
            for camel, snake in pairs:
                if camel in data and snake in data:
                    raise ValueError(f"give '{camel}' or '{snake}', not both")
        return data

    return check


def request_schemas() -> dict[GeminiMethod, CoreSchema]:
    """The request schemas of every route that takes a body (the OpenAPI document is made
    from these too: gemini/openapi.py)."""
    blob = _message(
        _Field("mime_type", _STR, required=True), _Field("data", _STR, required=True), name="Blob"
    )
    file_data = _message(
        _Field("mime_type", _STR), _Field("file_uri", _STR, required=True), name="FileData"
    )
    function_call = _message(
        _Field("name", _STR, required=True), _Field("args", _OBJECT), name="FunctionCall"
    )
    function_response = _message(
        _Field("name", _STR, required=True), _Field("response", _OBJECT), name="FunctionResponse"
    )
    part = _message(
        _Field("text", _STR),
        _Field("inline_data", blob),
        _Field("file_data", file_data),
        _Field("function_call", function_call),
        _Field("function_response", function_response),
        _Field("thought", cs.bool_schema()),
        _Field("thought_signature", _STR),
        name="Part",
    )
    content = _message(
        _Field("role", _STR), _Field("parts", cs.list_schema(part), nullable=False), name="Content"
    )
    # A conversation turn, as Google checks it: at least one part (and each part carries
    # something: _check_parts). Refused here, the request costs no audit record and no
    # upstream round trip.
    turn = _message(
        _Field("role", _STR),
        _Field("parts", cs.list_schema(part, min_length=1), required=True),
        name="Turn",
    )
    contents = cs.list_schema(turn, min_length=1)
    generate_fields = (
        _Field("contents", contents, required=True),
        _Field("system_instruction", content),
        _Field("tools", cs.list_schema(_OBJECT)),
        _Field("tool_config", _OBJECT),
        _Field("safety_settings", cs.list_schema(_OBJECT)),
        _Field("generation_config", _OBJECT),
        _Field("cached_content", _STR),
    )
    generate = _message(*generate_fields, name="GenerateContentRequest")
    nested_generate = _message(*generate_fields, _Field("model", _STR, required=True))
    count_tokens = _message(
        _Field("contents", contents), _Field("generate_content_request", nested_generate)
    )
    embed = _message(
        _Field("content", content, required=True),
        _Field("model", _STR),
        _Field("task_type", _STR),
        _Field("title", _STR),
        _Field("output_dimensionality", cs.int_schema()),
        name="EmbedContentRequest",
    )
    batch_embed = _message(_Field("requests", cs.list_schema(embed, min_length=1), required=True))
    return {
        GeminiMethod.GENERATE_CONTENT: generate,
        GeminiMethod.STREAM_GENERATE_CONTENT: generate,
        GeminiMethod.COUNT_TOKENS: count_tokens,
        GeminiMethod.EMBED_CONTENT: embed,
        GeminiMethod.BATCH_EMBED_CONTENTS: batch_embed,
    }


_SCHEMAS = {method: SchemaValidator(schema) for method, schema in request_schemas().items()}


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
        parsed = schema.validate_python(body)
    except ValidationError as exc:
        raise InvalidArgument(_first_problem(exc)) from exc
    if method is GeminiMethod.GENERATE_CONTENT or method is GeminiMethod.STREAM_GENERATE_CONTENT:
        _check_parts(parsed["contents"], "")
    elif method is GeminiMethod.COUNT_TOKENS:
        contents, nested = parsed.get("contents"), parsed.get("generate_content_request")
        if (contents is None) == (nested is None):
            raise InvalidArgument(
                "Invalid countTokens request: send exactly one of 'contents' or "
                "'generateContentRequest'."
            )
        if contents is None:
            _check_parts(nested["contents"], "generateContentRequest.")
        else:
            _check_parts(contents, "")
    elif method is GeminiMethod.BATCH_EMBED_CONTENTS:
        for index, request in enumerate(parsed["requests"]):
            inner = request.get("model")
            if inner is not None and inner != model:
                raise InvalidArgument(
                    f"Invalid value at 'requests[{index}].model': {inner!r} must be "
                    f"the model of the URL, {model!r}."
                )


def _check_parts(contents: list[dict[str, Any]], where: str) -> None:
    """Refuse a part with nothing in it: ``{}``, or an empty ``text`` alone (Google's 400).

    Anything else set (a thought signature beside an empty text, fields localgate does not
    know) is left for Google to judge. A part with a non-empty text, the usual one, costs
    one lookup.
    """
    for turn in contents:
        for part in turn["parts"]:
            if not part.get("text"):
                _find_empty_part(contents, where)
                return


def _find_empty_part(contents: list[dict[str, Any]], where: str) -> None:
    for turn_index, turn in enumerate(contents):
        for part_index, part in enumerate(turn["parts"]):
            if not any(
                value is not None and (name != "text" or value != "")
                for name, value in part.items()
            ):
                raise InvalidArgument(
                    f"Invalid value at '{where}contents[{turn_index}].parts[{part_index}]': "
                    "a part must carry data, e.g. non-empty 'text', 'inlineData' or "
                    "'functionCall'."
                )


def _first_problem(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    error = errors[0]
    where = ""
    for part in error["loc"]:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    if error["type"] == "missing":
        reason = "is required"
    elif error["type"] == "too_short":
        reason = "must not be empty"  # Google's words for an empty list
    else:
        reason = error["msg"][:1].lower() + error["msg"][1:]
    more = f" ({len(errors) - 1} more problem(s) not shown)" if len(errors) > 1 else ""
    return f"Invalid value at '{where or '<body>'}': {reason}.{more}"
