"""Every text-bearing field of a Gemini request, on every route, through the redactor.

Covered: ``contents[].parts[].text``, ``systemInstruction``, every string inside
``functionCall.args`` and ``functionResponse.response``, executable code and its
output, ``inlineData`` whose MIME type is text-like (decoded, redacted, re-encoded),
the content (and title) of ``embedContent``/``batchEmbedContents`` requests, and the
nested request of ``countTokens``. ``inlineData`` of other types and ``fileData``
cannot be read, so the policy's ``binary_data`` decides whether they may pass.
Field names are accepted in both camelCase and snake_case, as the API accepts them.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from localgate.frontdoor.routes import GeminiMethod
from localgate.redaction.session import RedactionSession

__all__ = ["redact_request_body"]

_TEXT_MIME_PREFIXES = ("text/",)
_TEXT_MIME_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/csv",
        "application/javascript",
        "application/x-ndjson",
        "application/sql",
    }
)


def redact_request_body(method: GeminiMethod, body: Any, session: RedactionSession) -> Any:
    """Redact ``body`` in place (and return it) for ``method``."""
    if not isinstance(body, dict):
        return body
    if method in (GeminiMethod.GENERATE_CONTENT, GeminiMethod.STREAM_GENERATE_CONTENT):
        _generate_request(body, "", session)
    elif method is GeminiMethod.COUNT_TOKENS:
        _generate_request(body, "", session)
        nested = _get(body, "generateContentRequest")
        if isinstance(nested, dict):
            _generate_request(nested, _key_path(body, "generateContentRequest") + ".", session)
    elif method is GeminiMethod.EMBED_CONTENT:
        _embed_request(body, "", session)
    elif method is GeminiMethod.BATCH_EMBED_CONTENTS:
        for index, request in enumerate(body.get("requests") or []):
            if isinstance(request, dict):
                _embed_request(request, f"requests[{index}].", session)
    return body


def _key(container: dict[str, Any], camel: str) -> str | None:
    if camel in container:
        return camel
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return snake if snake in container else None


def _get(container: dict[str, Any], camel: str) -> Any:
    key = _key(container, camel)
    return container[key] if key is not None else None


def _key_path(container: dict[str, Any], camel: str) -> str:
    return _key(container, camel) or camel


def _generate_request(body: dict[str, Any], prefix: str, session: RedactionSession) -> None:
    for index, content in enumerate(body.get("contents") or []):
        _content(content, f"{prefix}contents[{index}]", session)
    key = _key(body, "systemInstruction")
    if key is not None:
        _content(body[key], f"{prefix}{key}", session)


def _embed_request(body: dict[str, Any], prefix: str, session: RedactionSession) -> None:
    _content(body.get("content"), f"{prefix}content", session)
    if isinstance(body.get("title"), str):
        body["title"] = session.redact(body["title"], f"{prefix}title")


def _content(content: Any, path: str, session: RedactionSession) -> None:
    if not isinstance(content, dict):
        return
    for index, part in enumerate(content.get("parts") or []):
        if isinstance(part, dict):
            _part(part, f"{path}.parts[{index}]", session)


def _part(part: dict[str, Any], path: str, session: RedactionSession) -> None:
    if isinstance(part.get("text"), str):
        part["text"] = session.redact(part["text"], f"{path}.text")
    for camel, field in (("functionCall", "args"), ("functionResponse", "response")):
        key = _key(part, camel)
        if key is not None and isinstance(part[key], dict):
            call = part[key]
            if field in call:
                call[field] = _strings(call[field], f"{path}.{key}.{field}", session)
    for camel, field in (("executableCode", "code"), ("codeExecutionResult", "output")):
        key = _key(part, camel)
        if (
            key is not None
            and isinstance(part[key], dict)
            and isinstance(part[key].get(field), str)
        ):
            part[key][field] = session.redact(part[key][field], f"{path}.{key}.{field}")
    key = _key(part, "inlineData")
    if key is not None and isinstance(part[key], dict):
        _blob(part[key], f"{path}.{key}", session)
    key = _key(part, "fileData")
    if key is not None:
        blob = part[key] if isinstance(part[key], dict) else {}
        session.refuse_binary(f"{path}.{key}", str(_get(blob, "mimeType") or ""))


def _strings(value: Any, path: str, session: RedactionSession) -> Any:
    """Every string inside a JSON value, redacted; keys and other values as they are."""
    if isinstance(value, str):
        return session.redact(value, path)
    if isinstance(value, dict):
        return {key: _strings(item, f"{path}.{key}", session) for key, item in value.items()}
    if isinstance(value, list):
        return [_strings(item, f"{path}[{index}]", session) for index, item in enumerate(value)]
    return value


def _blob(blob: dict[str, Any], path: str, session: RedactionSession) -> None:
    mime_type = str(_get(blob, "mimeType") or "").split(";")[0].strip().lower()
    textual = mime_type.startswith(_TEXT_MIME_PREFIXES) or mime_type in _TEXT_MIME_TYPES
    data = blob.get("data")
    if not textual or not isinstance(data, str):
        session.refuse_binary(path, mime_type)
        return
    try:
        padded = data + "=" * (-len(data) % 4)
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        # Declared as text but not decodable as UTF-8 text: it cannot be checked.
        session.refuse_binary(path, mime_type)
        return
    redacted = session.redact(text, f"{path}.data")
    if redacted != text:
        blob["data"] = base64.b64encode(redacted.encode("utf-8")).decode("ascii")
