"""Which Gemini REST routes localgate serves, and how a request path maps onto one.

Paths follow Google's custom-method grammar ``{prefix}/{version}/{resource}[:{verb}]``.
Any base-URL prefix is accepted (the SDK keeps the prefix of its ``base_url``), but
the part after the version must be a route listed here: anything else is refused,
never forwarded, because an unknown route could carry data around the redactor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache

from localgate.errors import InvalidArgument, MethodNotAllowed, NotFound, PermissionDenied

__all__ = ["GeminiMethod", "GeminiRoute", "match_route"]


class GeminiMethod(Enum):
    """A Gemini API operation localgate understands.

    Each knows its HTTP method (GET for the model catalogue, POST for everything else)
    and whether its answer is a stream of responses; plain attributes, read per request.
    """

    _value_: str
    http_method: str
    streams: bool

    def __new__(cls, value: str, http_method: str = "POST", streams: bool = False) -> GeminiMethod:
        member = object.__new__(cls)
        member._value_ = value
        member.http_method = http_method
        member.streams = streams
        return member

    GENERATE_CONTENT = "generateContent"
    STREAM_GENERATE_CONTENT = ("streamGenerateContent", "POST", True)
    COUNT_TOKENS = "countTokens"
    EMBED_CONTENT = "embedContent"
    BATCH_EMBED_CONTENTS = "batchEmbedContents"
    LIST_MODELS = ("models.list", "GET")
    GET_MODEL = ("models.get", "GET")


_VERBS = {
    method.value: method
    for method in GeminiMethod
    if method not in (GeminiMethod.LIST_MODELS, GeminiMethod.GET_MODEL)
}


@dataclass(frozen=True, slots=True)
class GeminiRoute:
    """A parsed request path: API version, model resource name and operation."""

    version: str
    method: GeminiMethod
    collection: str  # "models" or "tunedModels"
    model_id: str | None  # None for list calls
    # The resource name as Gemini writes it, e.g. ``models/gemini-2.5-flash``; read on
    # every request, so spelled out once.
    model: str | None = field(init=False)

    def __post_init__(self) -> None:
        model = f"{self.collection}/{self.model_id}" if self.model_id else None
        object.__setattr__(self, "model", model)

    @property
    def upstream_path(self) -> str:
        """The path to call on the upstream, without prefix: ``v1beta/models/x:generateContent``."""
        path = f"{self.version}/{self.collection}"
        if self.model_id:
            path += f"/{self.model_id}"
        if self.method.value in _VERBS:
            path += f":{self.method.value}"
        return path


# The version segment, then the resource, then the model segment as it came.
_GEMINI_PATH = re.compile(
    r"^(?P<prefix>(?:/[^/]+)*?)/(?P<version>v1|v1beta|v1alpha)"
    r"/(?P<collection>models|tunedModels)"
    r"(?:/(?P<model>[^/:]+)(?::(?P<verb>[A-Za-z]+))?)?$"
)
# A model name: the characters Google's names use (gemini-2.5-flash, text-embedding-004,
# a pinned name@001), so a path can never smuggle `..`, `?`, `%`, spaces or another
# segment upstream. What fits can still be a phone number: the redaction stage checks.
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
# The Files API and anything that stores content server-side would bypass redaction.
_FILES_PATH = re.compile(r"(?:^|/)(?:upload/)?(?:v1|v1beta|v1alpha)/files(?:[/:?]|$)")


@lru_cache(maxsize=1024)
def match_route(http_method: str, path: str) -> GeminiRoute:
    """Map a request onto a route; raise NotFound, MethodNotAllowed or PermissionDenied.

    Apps call a few paths over and over: matches are remembered (routes are immutable),
    refusals are not.
    """
    if _FILES_PATH.search(path):
        raise PermissionDenied(
            "File uploads are disabled by the data-localization policy: an uploaded file "
            "would bypass redaction. Send content inline in the request instead."
        )
    found = _GEMINI_PATH.match(path)
    if found is None:
        raise NotFound(
            f"localgate does not serve {path}. Supported: "
            "{version}/models/{model}:generateContent|streamGenerateContent|countTokens|"
            "embedContent|batchEmbedContents, GET {version}/models and {version}/models/{model}."
        )
    model_id, verb = found["model"], found["verb"]
    if model_id is not None and not _MODEL_NAME.fullmatch(model_id):
        # The name is not repeated: it may be anything, personal data included.
        raise InvalidArgument(
            "The model name in the request path is not a valid model name: use letters, "
            "digits, '.', '-', '_' and '@' (at most 128 characters), e.g. gemini-2.5-flash."
        )
    if verb is None:
        method = GeminiMethod.GET_MODEL if model_id else GeminiMethod.LIST_MODELS
    elif verb in _VERBS:
        method = _VERBS[verb]
    else:
        raise NotFound(f"localgate does not serve the method :{verb}.")
    if http_method != method.http_method:
        raise MethodNotAllowed(
            f"{http_method} is not allowed on {path}; use {method.http_method}.",
            allowed=(method.http_method,),
        )
    return GeminiRoute(
        version=found["version"],
        method=method,
        collection=found["collection"],
        model_id=model_id,
    )
