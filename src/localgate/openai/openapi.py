"""The OpenAI-compatible routes' OpenAPI 3.1 document, made from the door's own parameters.

The door validates a request by hand (openai/chat.py, openai/embeddings.py) and refuses
any parameter it does not know; the request schemas here are keyed by the very sets it
checks against (``CHAT_PARAMETERS``, ``EMBEDDING_PARAMETERS``), so a parameter added to
the door without a schema here fails to build, and one removed disappears from the
document. Errors are in OpenAI's shape (openai/errors.py). Served at
``/openapi/openai.json``; ``make openapi`` writes it to docs/openapi/openai.json, where a
test holds it against the generated one.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from localgate import __version__
from localgate.gemini.openapi import HEADERS, json_array, json_object
from localgate.openai.chat import CHAT_PARAMETERS, MESSAGE_FIELDS, REASONING_EFFORTS
from localgate.openai.embeddings import EMBEDDING_PARAMETERS, MAX_INPUTS

__all__ = ["BASES", "openai_document"]

_REF = "#/components/schemas/"
_MODEL_PATTERN = r"^(models/)?[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$"
# The bases the door serves (openai/routes.py); the document's paths use the first.
BASES = ("/v1beta/openai", "/openai/v1")

_STRING_LIST = {"type": "array", "items": {"type": "string"}}
_CHAT_SCHEMAS: dict[str, Any] = {
    "model": {"type": "string", "pattern": _MODEL_PATTERN},
    "messages": {
        "type": "array",
        "minItems": 1,
        "items": {"$ref": _REF + "ChatMessage"},
    },
    "stream": {"type": "boolean"},
    "stream_options": {
        "type": "object",
        "properties": {"include_usage": {"type": "boolean"}},
        "description": "Only with `stream: true`.",
    },
    "tools": {"type": "array", "items": {"type": "object"}},
    "tool_choice": {"oneOf": [{"type": "string"}, {"type": "object"}]},
    "parallel_tool_calls": {"type": "boolean"},
    "response_format": {"type": "object"},
    "max_tokens": {"type": "integer", "minimum": 1},
    "max_completion_tokens": {"type": "integer", "minimum": 1},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1},
    "stop": {"oneOf": [{"type": "string"}, _STRING_LIST]},
    "n": {"type": "integer", "minimum": 1, "maximum": 8},
    "seed": {"type": "integer"},
    "logprobs": {"type": "boolean"},
    "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20},
    "reasoning_effort": {"type": "string", "enum": list(REASONING_EFFORTS)},
    "user": {"type": "string"},
    "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "store": {"const": False, "description": "`true` is refused: nothing is stored."},
    "modalities": {"const": ["text"], "description": "Only text output."},
}
# stream_options is refused without stream: true.
_DEPENDENT = {"stream_options": {"properties": {"stream": {"const": True}}, "required": ["stream"]}}
_TEXT_PART = {
    "type": "object",
    "properties": {"type": {"const": "text"}, "text": {"type": "string", "minLength": 1}},
    "required": ["type", "text"],
}
_CONTENT = {
    "oneOf": [
        {"type": "string", "minLength": 1},
        {"type": "array", "minItems": 1, "items": _TEXT_PART},
    ],
    "description": "Text, or parts: `text`, and on user messages `image_url` and "
    "`input_audio` (docs/openai.md).",
}
_MESSAGE_PROPERTIES: dict[str, Any] = {
    "content": _CONTENT,
    "tool_calls": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "type": {"const": "function"},
                "function": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "arguments": {
                            "type": "string",
                            "description": "The arguments as a JSON object's text.",
                        },
                    },
                    "required": ["name"],
                },
            },
            "required": ["id", "function"],
        },
    },
    "refusal": {"type": ["string", "null"]},
    "extra_content": {"type": "object"},
    "tool_call_id": {
        "type": "string",
        "description": "The id of a tool call of an earlier assistant message in `messages`.",
    },
}


def _message(role: str, fields: frozenset[str]) -> dict[str, Any]:
    """One role's message: exactly the fields the door accepts on it."""
    missing = sorted(fields - {"role"} - set(_MESSAGE_PROPERTIES))
    if missing:
        raise RuntimeError(f"the OpenAI contract has no schema for message fields {missing}")
    properties: dict[str, Any] = {"role": {"const": role}}
    properties.update({name: _MESSAGE_PROPERTIES[name] for name in sorted(fields - {"role"})})
    if role == "assistant":
        properties["content"] = {"oneOf": [_CONTENT, {"type": "null"}]}
    return {
        "type": "object",
        "properties": properties,
        "required": ["role"] if role == "assistant" else ["role", "content"],
        "additionalProperties": False,
    }


_EMBEDDING_SCHEMAS: dict[str, Any] = {
    "model": {"type": "string", "pattern": _MODEL_PATTERN},
    "input": {
        "oneOf": [
            {"type": "string", "minLength": 1},
            {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_INPUTS,
                "items": {"type": "string", "minLength": 1},
            },
        ]
    },
    "encoding_format": {"type": "string", "enum": ["float", "base64"]},
    "dimensions": {"type": "integer", "minimum": 1},
    "user": {"type": "string"},
}
_REFUSALS = {
    "400": "The request is malformed, names a parameter localgate does not support "
    "(`unsupported_parameter`, with `param`), or redaction policy blocks it.",
    "401": "No API key, or one localgate does not know (`invalid_api_key`).",
    "403": "A model or upstream outside the tenant's policy, a revoked or expired key.",
    "404": "A route localgate does not serve under these bases, or an unknown model.",
    "405": "The route exists under another HTTP method.",
    "408": "The client sent its request too slowly.",
    "413": "The body is larger than `server.max_body_bytes`.",
    "415": "The body is not JSON.",
    "429": "A tenant or key limit is reached (`rate_limit_exceeded`); `Retry-After` says "
    "when to try again.",
    "500": "An error inside the gateway.",
    "502": "The upstream answered something that is not a Gemini answer.",
    "503": "The upstream, its circuit breaker, the audit trail or the limits store is "
    "unavailable; nothing was sent, or the answer could not be recorded.",
    "504": "The upstream did not answer in time.",
}
_OPERATIONS = (
    (
        "chat/completions",
        "post",
        "chat_completions",
        "Chat completions (redacted before it leaves)",
    ),
    ("embeddings", "post", "embeddings", "Embeddings of one or more inputs"),
    ("models", "get", "models_list", "The models this tenant may use"),
    ("models/{model}", "get", "models_retrieve", "One model"),
)


def openai_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the OpenAI-compatible routes."""
    return _document()


def _request(schemas: dict[str, Any], names: frozenset[str], required: list[str]) -> Any:
    missing = sorted(names - set(schemas))
    if missing:
        raise RuntimeError(f"the OpenAI contract has no schema for {missing} (openai/openapi.py)")
    return {
        "type": "object",
        "properties": {name: schemas[name] for name in sorted(names)},
        "required": required,
        "additionalProperties": False,
        **({"dependentSchemas": _DEPENDENT} if "stream_options" in names else {}),
        "description": "Any other parameter is refused with 400 `unsupported_parameter` "
        "(unless the operator sets `openai.drop_unsupported`).",
    }


@cache
def _document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for suffix, verb, operation_id, summary in _OPERATIONS:
        paths[f"{BASES[0]}/{suffix}"] = {verb: _operation(suffix, operation_id, summary)}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "localgate OpenAI-compatible routes",
            "version": __version__,
            "description": (
                "The OpenAI API as localgate's front door serves it (docs/openai.md): each "
                "request is translated to the Gemini request it stands for, redacted, "
                "audited and answered in OpenAI's shape. The same routes are served under "
                f"`{BASES[1]}/` and behind any path prefix. Errors use OpenAI's error shape."
            ),
        },
        "servers": [{"url": "http://127.0.0.1:8080"}],
        "security": [{"bearer": []}, {"apiKeyHeader": []}, {"apiKeyQuery": []}],
        "paths": paths,
        "components": {
            "schemas": {
                "ChatCompletionRequest": _request(
                    _CHAT_SCHEMAS, CHAT_PARAMETERS, ["messages", "model"]
                ),
                "EmbeddingsRequest": _request(
                    _EMBEDDING_SCHEMAS, EMBEDDING_PARAMETERS, ["input", "model"]
                ),
                "ChatMessage": {
                    "oneOf": [
                        _message(str(role), fields)
                        for role, fields in sorted(MESSAGE_FIELDS.items())
                    ]
                },
                "ChatCompletion": _CHAT_COMPLETION,
                "ChatCompletionChunk": _CHAT_COMPLETION_CHUNK,
                "EmbeddingList": _EMBEDDING_LIST,
                "Model": _MODEL,
                "ModelList": json_object(
                    {"object": {"const": "list"}, "data": json_array({"$ref": _REF + "Model"})},
                    ["object", "data"],
                ),
                "Error": _ERROR,
            },
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "A localgate key."},
                "apiKeyHeader": {"type": "apiKey", "in": "header", "name": "x-goog-api-key"},
                "apiKeyQuery": {"type": "apiKey", "in": "query", "name": "key"},
            },
            "headers": _HEADERS,
        },
    }


def _operation(suffix: str, operation_id: str, summary: str) -> dict[str, Any]:
    answer: dict[str, Any]
    request: str | None = None
    if suffix == "chat/completions":
        request = "ChatCompletionRequest"
        answer = {
            "application/json": {"schema": {"$ref": _REF + "ChatCompletion"}},
            # With stream: true, one Server-Sent Event per chunk, then `data: [DONE]`.
            "text/event-stream": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "data": {
                            "type": "string",
                            "description": "A ChatCompletionChunk as JSON, or `[DONE]`.",
                        }
                    },
                }
            },
        }
    elif suffix == "embeddings":
        request = "EmbeddingsRequest"
        answer = {"application/json": {"schema": {"$ref": _REF + "EmbeddingList"}}}
    elif suffix == "models":
        answer = {"application/json": {"schema": {"$ref": _REF + "ModelList"}}}
    else:
        answer = {"application/json": {"schema": {"$ref": _REF + "Model"}}}
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "summary": summary,
        "parameters": [],
        "responses": {
            "200": {
                "description": "The answer, with personal data restored.",
                "headers": _SUCCESS_HEADERS,
                "content": answer,
            },
            **{
                status: {
                    "description": description,
                    "headers": {
                        **_REFUSAL_HEADERS,
                        **({"allow": {"schema": {"type": "string"}}} if status == "405" else {}),
                    },
                    "content": {"application/json": {"schema": {"$ref": _REF + "Error"}}},
                }
                for status, description in _REFUSALS.items()
            },
        },
    }
    if suffix == "models/{model}":
        operation["parameters"].append(
            {
                "name": "model",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$"},
            }
        )
    for name, description in (
        ("x-localgate-user", "The end user, for sticky canary splits."),
        ("x-localgate-priority", "`low`, `normal` or `high`, where the key may set it."),
    ):
        operation["parameters"].append(
            {
                "name": name,
                "in": "header",
                "required": False,
                "description": description,
                "schema": {"type": "string"},
            }
        )
    if request is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": _REF + request}}},
        }
    return operation


_NULLABLE_STRING = {"type": ["string", "null"]}
_ERROR = json_object(
    {
        "error": json_object(
            {
                "message": {"type": "string", "minLength": 1},
                "type": {"type": "string"},
                "param": _NULLABLE_STRING,
                "code": _NULLABLE_STRING,
            },
            ["message", "type", "param", "code"],
        )
    },
    ["error"],
)
_USAGE = json_object(
    {
        "prompt_tokens": {"type": "integer"},
        "completion_tokens": {"type": "integer"},
        "total_tokens": {"type": "integer"},
    },
    ["prompt_tokens", "completion_tokens", "total_tokens"],
)
_CHAT_COMPLETION = json_object(
    {
        "id": {"type": "string"},
        "object": {"const": "chat.completion"},
        "created": {"type": "integer"},
        "model": {"type": "string"},
        "choices": json_array(
            json_object(
                {
                    "index": {"type": "integer"},
                    "message": json_object(
                        {
                            "role": {"const": "assistant"},
                            "content": _NULLABLE_STRING,
                            "tool_calls": json_array({"type": "object"}),
                        },
                        ["role"],
                    ),
                    "finish_reason": _NULLABLE_STRING,
                },
                ["index", "message"],
            )
        ),
        "usage": _USAGE,
    },
    ["id", "object", "created", "model", "choices"],
)
_CHAT_COMPLETION_CHUNK = json_object(
    {
        "id": {"type": "string"},
        "object": {"const": "chat.completion.chunk"},
        "created": {"type": "integer"},
        "model": {"type": "string"},
        "choices": json_array({"type": "object"}),
        "usage": {"oneOf": [_USAGE, {"type": "null"}]},
    },
    ["id", "object", "created", "model", "choices"],
)
_EMBEDDING_LIST = json_object(
    {
        "object": {"const": "list"},
        "data": json_array(
            json_object(
                {
                    "object": {"const": "embedding"},
                    "index": {"type": "integer"},
                    "embedding": {
                        "oneOf": [
                            json_array({"type": "number"}),
                            {"type": "string", "description": "base64 of float32 values"},
                        ]
                    },
                },
                ["object", "index", "embedding"],
            )
        ),
        "model": {"type": "string"},
        "usage": {"type": "object"},
    },
    ["object", "data", "model"],
)
_MODEL = json_object(
    {
        "id": {"type": "string"},
        "object": {"const": "model"},
        "created": {"type": "integer"},
        "owned_by": {"type": "string"},
    },
    ["id", "object"],
)
_HEADERS: dict[str, Any] = {name: HEADERS[name] for name in ("RequestId", "Cache", "RetryAfter")}
_SUCCESS_HEADERS = {
    "x-request-id": {"$ref": "#/components/headers/RequestId"},
    "x-localgate-cache": {"$ref": "#/components/headers/Cache"},
}
_REFUSAL_HEADERS = {
    "x-request-id": {"$ref": "#/components/headers/RequestId"},
    "retry-after": {"$ref": "#/components/headers/RetryAfter"},
}
