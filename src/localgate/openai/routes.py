"""Which OpenAI-compatible routes localgate serves, and how a request path maps onto one.

The paths of Google's compatibility layer, ``{prefix}/v1beta/openai/{operation}``, so that
``OpenAI(base_url="http://gateway/v1beta/openai/")`` works unchanged, and the same under
``{prefix}/openai/v1/`` for clients that assume ``/v1``. Anything else under those bases is
refused, never forwarded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from localgate.errors import MethodNotAllowed, NotFound

__all__ = ["OpenAIOperation", "OpenAIRoute", "is_openai_path", "match_openai_route"]


class OpenAIOperation(Enum):
    """An OpenAI API operation localgate serves, with its HTTP method."""

    _value_: str
    http_method: str

    def __new__(cls, value: str, http_method: str = "POST") -> OpenAIOperation:
        member = object.__new__(cls)
        member._value_ = value
        member.http_method = http_method
        return member

    CHAT_COMPLETIONS = "chat.completions"
    EMBEDDINGS = "embeddings"
    LIST_MODELS = ("models.list", "GET")
    GET_MODEL = ("models.retrieve", "GET")


@dataclass(frozen=True, slots=True)
class OpenAIRoute:
    """A parsed OpenAI-compatible path: the operation and, for ``models/{id}``, the model."""

    operation: OpenAIOperation
    model_id: str | None = None


# The base (Google's or the /v1 one clients assume), then the operation.
_OPENAI_PATH = re.compile(
    r"^(?:/[^/]+)*?/(?:v1beta/openai|openai/v1)"
    r"/(?P<operation>chat/completions|embeddings|models(?:/(?P<model>[^/]+))?)/?$"
)
_BASES = ("/v1beta/openai/", "/openai/v1/")
_OPERATIONS = {
    "chat/completions": OpenAIOperation.CHAT_COMPLETIONS,
    "embeddings": OpenAIOperation.EMBEDDINGS,
}


def is_openai_path(path: str) -> bool:
    """Whether ``path`` is under one of the OpenAI-compatible bases (a route or not)."""
    return any(base in path for base in _BASES) or path.endswith(("/v1beta/openai", "/openai/v1"))


def match_openai_route(http_method: str, path: str) -> OpenAIRoute:
    """Map a request onto a route; raise NotFound or MethodNotAllowed."""
    found = _OPENAI_PATH.match(path)
    if found is None:
        raise NotFound(
            f"localgate does not serve {path}. Supported under /v1beta/openai/ and /openai/v1/: "
            "POST chat/completions, POST embeddings, GET models and GET models/{model}."
        )
    operation = found["operation"]
    route: OpenAIRoute
    if operation in _OPERATIONS:
        route = OpenAIRoute(_OPERATIONS[operation])
    elif found["model"] is not None:
        route = OpenAIRoute(OpenAIOperation.GET_MODEL, found["model"])
    else:
        route = OpenAIRoute(OpenAIOperation.LIST_MODELS)
    expected = route.operation.http_method
    if http_method != expected:
        raise MethodNotAllowed(
            f"{http_method} is not allowed on {path}; use {expected}.", allowed=(expected,)
        )
    return route
