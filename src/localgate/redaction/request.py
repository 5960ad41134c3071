"""Every string of a Gemini request, on every route, through the redactor.

The walk does not rely on knowing which fields carry text: a field it does not know
(a new API field, a snake_case spelling, a key added by ``extra_body``) could otherwise
carry personal data around the redactor. So every string value is scanned — text parts,
system instruction, function arguments and responses, code, titles, unknown fields —
and so is every dict key that is not a plain field name (letters and underscores only).
Exceptions: short letter-only strings (roles, enum values); ``thoughtSignature``
(opaque: only signatures the gateway itself sealed for this tenant go on, opened to the
upstream's original — signatures.py); and ``inlineData``/``fileData``: text-like MIME
types in UTF-8 are decoded, redacted and re-encoded; anything else cannot be read, so
the policy's ``binary_data`` decides.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from localgate.errors import InvalidArgument
from localgate.gemini.routes import GeminiMethod
from localgate.redaction.session import RedactionSession
from localgate.redaction.signatures import SIGNATURE_FIELDS

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
    """Redact every string in ``body`` (and return the redacted copy)."""
    del method  # every route is walked the same way: all strings, whatever the field
    if not isinstance(body, dict):
        return body
    return _value(body, "", session)


def _value(value: Any, path: str, session: RedactionSession, depth: int = 0) -> Any:
    if isinstance(value, str):
        if _IDENTIFIER.fullmatch(value):
            return value  # enum values, roles, function names: nothing a recognizer finds
        return session.redact(value, path or "<body>", original=path.endswith(".text"))
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) >= _LONG:
        # Tool output straight from a database: {"mobile": 13812345678}. Read as the
        # digits it holds; a finding replaces the number with its placeholder (a string).
        digits = _digits(value)
        redacted = session.redact(digits, path or "<body>")
        return value if redacted == digits else redacted
    if not isinstance(value, list | dict):
        return value
    if depth >= _MAX_DEPTH:
        # The doors refuse bodies nested deeper than 100 levels before they get here; this
        # holds for any other way in, and for the compiled walk, which has no recursion
        # limit of its own (nested deep enough, it would overrun the C stack).
        raise InvalidArgument(
            f"Invalid JSON payload received: nested deeper than {_MAX_DEPTH} levels."
        )
    depth += 1
    if isinstance(value, list):
        return [
            _value(item, f"{path}[{index}]", session, depth) for index, item in enumerate(value)
        ]
    out: dict[str, Any] = {}
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if key in SIGNATURE_FIELDS:
            signature = session.signature(item, where)
            if signature is not None:
                out[key] = signature
        elif key in _BLOBS and isinstance(item, dict):
            out[key] = _blob(item, where, session, depth)
        elif key in _FILES:
            blob = item if isinstance(item, dict) else {}
            session.refuse_binary(where, str(_get(blob, "mimeType") or ""))
            out[key] = _value(item, where, session, depth)  # the URI and names: text too
        else:
            # Keys are data too when they are not plain field names (tool output keyed by
            # e-mail address, say). Long capitalised letter-only keys can be secrets
            # (AKIA…); field names start lower-case (systemInstruction, generation_config).
            plain_name = _FIELD_NAME.fullmatch(key) and (
                len(key) <= _IDENTIFIER_MAX or key[0].islower()
            )
            name = key if plain_name else session.redact(key, f"{where} (key)")
            out[name] = _value(item, where, session, depth)
    return out


# Short letter-only strings: "user", "STRING", "BLOCK_ONLY_HIGH", "get_weather". Longer
# ones are scanned: an AWS key id can be letters only, but is 20 characters.
_IDENTIFIER_MAX = 16
# How deep the walk goes: more than the doors let in (100), far less than the C stack
# of the compiled walk allows.
_MAX_DEPTH = 256
_IDENTIFIER = re.compile(r"[A-Za-z_]{1,16}")
# Numbers of seven digits and more are read for identifiers; smaller ones (token counts,
# temperatures, seeds below a million) cannot be one.
_LONG = 1_000_000
# Keys with digits are scanned: ``{"zhang_13812345678": ...}`` is data, not a field name.
_FIELD_NAME = re.compile(r"[A-Za-z_]{1,64}")
_BLOBS = frozenset({"inlineData", "inline_data"})
_FILES = frozenset({"fileData", "file_data"})
_TEXT_CHARSETS = frozenset({"", "utf-8", "utf8", "us-ascii", "ascii"})


def _digits(number: int | float) -> str:
    """The digits a JSON number spells: 13812345678.0 and 1.3812345678e10 are 13812345678."""
    if isinstance(number, float) and number.is_integer():
        return str(int(number))
    return str(number)


def _get(container: dict[str, Any], camel: str) -> Any:
    if camel in container:
        return container[camel]
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return container.get(snake)


def _blob(blob: dict[str, Any], path: str, session: RedactionSession, depth: int) -> dict[str, Any]:
    declared = str(_get(blob, "mimeType") or "")
    mime_type, _, parameters = declared.partition(";")
    mime_type = mime_type.strip().lower()
    charset = ""
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
    textual = mime_type.startswith(_TEXT_MIME_PREFIXES) or mime_type in _TEXT_MIME_TYPES
    data = blob.get("data")
    # Everything beside the data (a display name, the MIME type's parameters, unknown
    # keys) is text like any other.
    blob = {
        key: item if key == "data" else _value(item, f"{path}.{key}", session, depth)
        for key, item in blob.items()
    }
    if not textual or not isinstance(data, str) or charset not in _TEXT_CHARSETS:
        session.refuse_binary(path, mime_type)
        return blob
    try:
        padded = data + "=" * (-len(data) % 4)
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        text = "\x00"  # not decodable as UTF-8 text: it cannot be checked
    if "\x00" in text:
        # NULs mean another encoding (UTF-16 decodes as "valid" UTF-8 with NULs between
        # the digits): it cannot be checked.
        session.refuse_binary(path, mime_type)
        return blob
    redacted = session.redact(text, f"{path}.data", original=True)
    if redacted == text:
        return blob
    return {**blob, "data": base64.b64encode(redacted.encode("utf-8")).decode("ascii")}
