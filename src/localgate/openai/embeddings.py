"""Embeddings and the model catalogue: OpenAI requests as Gemini's, answers back.

``POST embeddings`` becomes ``batchEmbedContents`` (one request per input string), so
the inputs are redacted like any text; ``GET models`` is ``models.list`` and
``GET models/{id}`` is ``models.get``.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from localgate.openai.chat import model_name
from localgate.openai.errors import InvalidParameter

__all__ = [
    "EMBEDDING_PARAMETERS",
    "MAX_INPUTS",
    "EmbeddingsRequest",
    "embeddings_answer",
    "model_answer",
    "models_answer",
    "translate_embeddings_request",
]

_EMBEDDING_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})
# The most inputs one batchEmbedContents request takes.
_MAX_INPUTS = 100
# For the contract (openai/openapi.py).
EMBEDDING_PARAMETERS = _EMBEDDING_FIELDS
MAX_INPUTS = _MAX_INPUTS


class EmbeddingsRequest:
    """The translated request: the Gemini body, and how the client wants the vectors."""

    __slots__ = ("base64", "body", "model", "user")

    def __init__(self, model: str, body: dict[str, Any], base64: bool, user: str | None) -> None:
        self.model = model
        self.body = body
        self.base64 = base64
        self.user = user


def translate_embeddings_request(
    request: Any, *, drop_unsupported: bool = False
) -> EmbeddingsRequest:
    """The ``batchEmbedContents`` body for an OpenAI embeddings request."""
    if not isinstance(request, dict):
        raise InvalidParameter("The request body must be a JSON object.", "body")
    for name in request:
        if name not in _EMBEDDING_FIELDS and not drop_unsupported:
            raise InvalidParameter(
                f"The parameter '{name}' is not supported by localgate's embeddings endpoint.",
                name,
                "unsupported_parameter",
            )
    model = model_name(request.get("model"))
    inputs = request.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if (
        not isinstance(inputs, list)
        or not inputs
        or not all(isinstance(item, str) and item for item in inputs)
    ):
        raise InvalidParameter(
            "'input' must be a non-empty string or an array of non-empty strings (token "
            "arrays are not supported).",
            "input",
        )
    if len(inputs) > _MAX_INPUTS:
        raise InvalidParameter(f"'input' takes at most {_MAX_INPUTS} strings.", "input")
    encoding = request.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise InvalidParameter("'encoding_format' must be float or base64.", "encoding_format")
    dimensions = request.get("dimensions")
    if dimensions is not None and (
        not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1
    ):
        raise InvalidParameter("'dimensions' must be a positive integer.", "dimensions")
    resource = f"models/{model}"
    requests = []
    for text in inputs:
        item: dict[str, Any] = {"model": resource, "content": {"parts": [{"text": text}]}}
        if dimensions is not None:
            item["outputDimensionality"] = dimensions
        requests.append(item)
    user = request.get("user")
    return EmbeddingsRequest(
        model, {"requests": requests}, encoding == "base64", user if isinstance(user, str) else None
    )


def embeddings_answer(answer: Any, request: EmbeddingsRequest) -> dict[str, Any]:
    """The OpenAI embeddings list for a ``batchEmbedContents`` answer."""
    embeddings = answer.get("embeddings") if isinstance(answer, dict) else None
    data = []
    for index, embedding in enumerate(embeddings if isinstance(embeddings, list) else ()):
        values = embedding.get("values") if isinstance(embedding, dict) else None
        vector = [float(value) for value in values] if isinstance(values, list) else []
        encoded: Any = vector
        if request.base64:
            # Little-endian float32, as OpenAI sends it and the SDK decodes it.
            encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    # Gemini's embedding answers count no tokens.
    return {
        "object": "list",
        "data": data,
        "model": request.model,
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    }


def model_answer(model: Any) -> dict[str, Any]:
    """An OpenAI model object for a Gemini ``Model``."""
    name = model.get("name") if isinstance(model, dict) else None
    name = name if isinstance(name, str) else ""
    return {
        "id": name.removeprefix("models/").removeprefix("tunedModels/"),
        "object": "model",
        "created": 0,
        "owned_by": "google",
    }


def models_answer(answer: Any) -> dict[str, Any]:
    """The OpenAI model list for a ``models.list`` answer."""
    models = answer.get("models") if isinstance(answer, dict) else None
    return {
        "object": "list",
        "data": [model_answer(model) for model in models or () if isinstance(model, dict)],
    }
