"""The data plane's OpenAPI 3.1 document, made from the schemas that validate requests.

Request bodies come from ``gemini.schemas.request_schemas`` (the pydantic-core schemas
every request is checked against), converted by pydantic's JSON Schema generator, so the
document cannot say something the gateway does not check. Paths come from the route
table (``GeminiMethod``); refusals, headers and the operations endpoints are described
here. Served at ``/openapi.json``; ``make openapi`` writes it to docs/openapi/, where a
test holds it against the generated one so that a change to the contract shows in the
diff.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic.json_schema import GenerateJsonSchema

from localgate import __version__
from localgate.gemini.routes import GeminiMethod
from localgate.gemini.schemas import request_schemas

__all__ = ["HEADERS", "json_array", "json_object", "openapi_document"]

_REF = "#/components/schemas/"
_MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$"
_SUMMARIES = {
    GeminiMethod.GENERATE_CONTENT: "Generate an answer (personal data redacted before it leaves)",
    GeminiMethod.STREAM_GENERATE_CONTENT: "Generate an answer as a stream of responses",
    GeminiMethod.COUNT_TOKENS: "Count the tokens of a request",
    GeminiMethod.EMBED_CONTENT: "Embed one content",
    GeminiMethod.BATCH_EMBED_CONTENTS: "Embed several contents",
    GeminiMethod.LIST_MODELS: "List the models this tenant may use",
    GeminiMethod.GET_MODEL: "Describe one model",
}
_ANSWERS = {
    GeminiMethod.GENERATE_CONTENT: "GenerateContentResponse",
    GeminiMethod.STREAM_GENERATE_CONTENT: "GenerateContentResponse",
    GeminiMethod.COUNT_TOKENS: "CountTokensResponse",
    GeminiMethod.EMBED_CONTENT: "EmbedContentResponse",
    GeminiMethod.BATCH_EMBED_CONTENTS: "BatchEmbedContentsResponse",
    GeminiMethod.LIST_MODELS: "ListModelsResponse",
    GeminiMethod.GET_MODEL: "Model",
}
# The refusals a Gemini route can answer, each in the error envelope.
_REFUSALS = {
    "400": "The request is malformed or its body does not fit the method (INVALID_ARGUMENT), "
    "or redaction policy blocks it (a `block` action, binary data).",
    "401": "No API key, or one localgate does not know (UNAUTHENTICATED).",
    "403": "Not allowed: the Files API, a model or upstream outside the tenant's policy, a "
    "revoked or expired key (PERMISSION_DENIED).",
    "404": "A route localgate does not serve, or an unknown model (NOT_FOUND).",
    "405": "The route exists under another HTTP method.",
    "408": "The client sent its request too slowly.",
    "413": "The body is larger than `server.max_body_bytes`.",
    "415": "The body is not JSON.",
    "429": "A tenant or key limit is reached (RESOURCE_EXHAUSTED), or the upstream's quota; "
    "`Retry-After` says when to try again.",
    "500": "An error inside the gateway (INTERNAL).",
    "502": "The upstream answered something that is not a Gemini answer.",
    "503": "The upstream, its circuit breaker, the audit trail or the limits store is "
    "unavailable (UNAVAILABLE); nothing was sent, or the answer could not be recorded.",
    "504": "The upstream did not answer in time (DEADLINE_EXCEEDED).",
}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the Gemini routes and the operations endpoints."""
    return _document()


@cache
def _document() -> dict[str, Any]:
    schemas: dict[str, Any] = {
        "ErrorEnvelope": _ERROR_ENVELOPE,
        "GenerateContentResponse": _GENERATE_CONTENT_RESPONSE,
        "CountTokensResponse": json_object({"totalTokens": {"type": "integer"}}, ["totalTokens"]),
        "EmbedContentResponse": json_object(
            {"embedding": json_object({"values": json_array({"type": "number"})}, ["values"])},
            ["embedding"],
        ),
        "BatchEmbedContentsResponse": json_object(
            {
                "embeddings": json_array(
                    json_object({"values": json_array({"type": "number"})}, ["values"])
                )
            },
            ["embeddings"],
        ),
        "Model": json_object({"name": {"type": "string"}}, ["name"]),
        "ListModelsResponse": json_object(
            {"models": json_array({"$ref": _REF + "Model"}), "nextPageToken": {"type": "string"}},
            [],
        ),
    }
    requests: dict[GeminiMethod, str] = {}
    for method, core in request_schemas().items():
        generated = GenerateJsonSchema(by_alias=True, ref_template=_REF + "{model}").generate(
            core, mode="validation"
        )
        for name, schema in generated.pop("$defs", {}).items():
            schemas[name] = _without_titles(schema)
        if "$ref" in generated:
            requests[method] = generated["$ref"].removeprefix(_REF)
        else:
            verb = str(method.value)
            name = str(core.get("ref") or verb[0].upper() + verb[1:] + "Request")
            schemas[name] = _without_titles(generated)
            requests[method] = name
    paths: dict[str, Any] = {}
    for method in GeminiMethod:
        path = _path_of(method)
        operation = _operation(method, requests.get(method))
        paths.setdefault(path, {})[method.http_method.lower()] = operation
    paths.update(_OPERATIONS_PATHS)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "localgate data plane",
            "version": __version__,
            "description": (
                "The Gemini REST API as localgate serves it: personal data in requests is "
                "replaced by placeholders before anything leaves and put back into the "
                "answer; every call is on the tenant's audit trail. Paths may carry any "
                "prefix before the version (the SDK keeps its base URL's path). Request "
                "bodies are checked against these schemas; unknown fields pass through to "
                "the upstream unchanged."
            ),
        },
        "servers": [{"url": "http://127.0.0.1:8080"}],
        "security": [{"apiKeyHeader": []}, {"apiKeyQuery": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "apiKeyHeader": {"type": "apiKey", "in": "header", "name": "x-goog-api-key"},
                "apiKeyQuery": {"type": "apiKey", "in": "query", "name": "key"},
            },
            "headers": HEADERS,
            "parameters": _PARAMETERS,
            "responses": {
                status: {
                    "description": description,
                    "headers": {
                        **_REFUSAL_HEADERS,
                        **({"allow": {"schema": {"type": "string"}}} if status == "405" else {}),
                    },
                    "content": {"application/json": {"schema": {"$ref": _REF + "ErrorEnvelope"}}},
                }
                for status, description in _REFUSALS.items()
            },
        },
    }


def _path_of(method: GeminiMethod) -> str:
    if method is GeminiMethod.LIST_MODELS:
        return "/{version}/{collection}"
    if method is GeminiMethod.GET_MODEL:
        return "/{version}/{collection}/{model}"
    return "/{version}/{collection}/{model}:" + str(method.value)


def _operation(method: GeminiMethod, request: str | None) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {
            "name": "version",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "enum": ["v1", "v1beta", "v1alpha"]},
        },
        {
            "name": "collection",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "enum": ["models", "tunedModels"]},
        },
    ]
    if method is not GeminiMethod.LIST_MODELS:
        parameters.append(
            {
                "name": "model",
                "in": "path",
                "required": True,
                "description": "The model's name, e.g. gemini-2.5-flash (a route may map an "
                "alias to a pinned version).",
                "schema": {"type": "string", "pattern": _MODEL_PATTERN},
            }
        )
    parameters += [{"$ref": "#/components/parameters/" + name} for name in ("Priority", "User")]
    answer = {"$ref": _REF + _ANSWERS[method]}
    if method.streams:
        parameters.append(
            {
                "name": "alt",
                "in": "query",
                "required": False,
                "description": "`sse` for Server-Sent Events; otherwise one JSON array.",
                "schema": {"type": "string", "enum": ["sse"]},
            }
        )
        content: dict[str, Any] = {
            # One Server-Sent Event per response: its data is a GenerateContentResponse.
            "text/event-stream": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "data": {
                            "type": "string",
                            "contentMediaType": "application/json",
                            "contentSchema": answer,
                        },
                        "event": {"type": "string"},
                    },
                    "required": ["data"],
                }
            },
            "application/json": {"schema": {"type": "array", "items": answer}},
        }
    else:
        content = {"application/json": {"schema": answer}}
    operation: dict[str, Any] = {
        "operationId": method.name.lower(),
        "summary": _SUMMARIES[method],
        "parameters": parameters,
        "responses": {
            "200": {
                "description": "The upstream's answer, with personal data restored.",
                "headers": _SUCCESS_HEADERS,
                "content": content,
            },
            **{
                status: {
                    "description": description,
                    "headers": _REFUSAL_HEADERS,
                    "content": {"application/json": {"schema": {"$ref": _REF + "ErrorEnvelope"}}},
                }
                for status, description in _REFUSALS.items()
                if status not in ("405",)
            },
            "405": {
                "description": _REFUSALS["405"],
                "headers": {**_REFUSAL_HEADERS, "allow": {"schema": {"type": "string"}}},
                "content": {"application/json": {"schema": {"$ref": _REF + "ErrorEnvelope"}}},
            },
        },
    }
    if request is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": _REF + request}}},
        }
    return operation


def _without_titles(schema: Any) -> Any:
    """The generated schema without pydantic's titles (noise in a contract)."""
    if isinstance(schema, dict):
        return {key: _without_titles(value) for key, value in schema.items() if key != "title"}
    if isinstance(schema, list):
        return [_without_titles(value) for value in schema]
    return schema


def json_object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A JSON Schema object with these properties (``required``: those it must have)."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def json_array(items: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema array of ``items``."""
    return {"type": "array", "items": items}


_ERROR_ENVELOPE = json_object(
    {
        "error": json_object(
            {
                "code": {"type": "integer", "minimum": 400, "maximum": 599},
                "message": {"type": "string", "minLength": 1},
                "status": {"type": "string", "pattern": "^[A-Z_]+$"},
                "details": json_array({"type": "object"}),
            },
            ["code", "message", "status"],
        )
    },
    ["error"],
)

_GENERATE_CONTENT_RESPONSE = json_object(
    {
        "candidates": json_array(
            json_object(
                {
                    "content": json_object(
                        {"role": {"type": "string"}, "parts": json_array({"type": "object"})}, []
                    ),
                    "finishReason": {"type": "string"},
                    "index": {"type": "integer"},
                    "avgLogprobs": {"type": "number"},
                },
                [],
            )
        ),
        "promptFeedback": {"type": "object"},
        "usageMetadata": json_object(
            {
                "promptTokenCount": {"type": "integer"},
                "candidatesTokenCount": {"type": "integer"},
                "totalTokenCount": {"type": "integer"},
                "cachedContentTokenCount": {"type": "integer"},
                "thoughtsTokenCount": {"type": "integer"},
            },
            [],
        ),
        "modelVersion": {"type": "string"},
        "responseId": {"type": "string"},
    },
    [],
)

# The localgate headers both dialects' documents describe (components.headers).
HEADERS: dict[str, Any] = {
    "RequestId": {
        "description": "The request's id: in the access log and the audit record.",
        "schema": {"type": "string"},
    },
    "Cache": {
        "description": "`hit` (exact or semantic) or `miss`, when the tenant's cache is on.",
        "schema": {"type": "string"},
    },
    "Upstream": {
        "description": "The named upstream that served the answer.",
        "schema": {"type": "string"},
    },
    "RetryAfter": {
        "description": "Seconds to wait before trying again.",
        "schema": {"type": "integer", "minimum": 0},
    },
}
_PARAMETERS: dict[str, Any] = {
    "Priority": {
        "name": "x-localgate-priority",
        "in": "header",
        "required": False,
        "description": "The request's class in the admission queue: `low`, `normal` or "
        "`high`; honoured only for keys or tenants with `allow_priority_header`, any other "
        "value is ignored.",
        "schema": {"type": "string"},
    },
    "User": {
        "name": "x-localgate-user",
        "in": "header",
        "required": False,
        "description": "The end user, for sticky canary splits (`sticky: user`).",
        "schema": {"type": "string"},
    },
}
_SUCCESS_HEADERS = {
    "x-request-id": {"$ref": "#/components/headers/RequestId"},
    "x-localgate-cache": {"$ref": "#/components/headers/Cache"},
    "x-localgate-upstream": {"$ref": "#/components/headers/Upstream"},
}
_REFUSAL_HEADERS = {
    "x-request-id": {"$ref": "#/components/headers/RequestId"},
    "retry-after": {"$ref": "#/components/headers/RetryAfter"},
}
_OPERATIONS_PATHS: dict[str, Any] = {
    "/healthz": {
        "get": {
            "operationId": "healthz",
            "summary": "The process is alive",
            "security": [],
            "responses": {"200": {"description": "Alive."}},
        }
    },
    "/readyz": {
        "get": {
            "operationId": "readyz",
            "summary": "Whether this replica should receive traffic, with each check",
            "security": [],
            "responses": {
                "200": {
                    "description": "Ready.",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "503": {
                    "description": "Not ready, or draining.",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
            },
        }
    },
    "/metrics": {
        "get": {
            "operationId": "metrics",
            "summary": "Prometheus metrics",
            "security": [],
            "responses": {
                "200": {"description": "Prometheus text format.", "content": {"text/plain": {}}}
            },
        }
    },
    "/openapi.json": {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "security": [],
            "responses": {
                "200": {
                    "description": "The OpenAPI document.",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        }
    },
    "/openapi/openai.json": {
        "get": {
            "operationId": "openapi_openai",
            "summary": "The OpenAI-compatible routes' document (docs/openapi/openai.json)",
            "security": [],
            "responses": {
                "200": {
                    "description": "The OpenAPI document.",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        }
    },
}
