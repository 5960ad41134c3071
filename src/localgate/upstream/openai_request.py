"""Gemini requests as an OpenAI-compatible server takes them (chat completions, embeddings).

What the mapping keeps is listed field by field in docs/openai-upstreams.md; what it
cannot carry is refused with ``InvalidArgument`` naming the field, never dropped. Tool
calls get ids from their place in the conversation (``call_{turn}_{n}``: the n-th call of
contents[turn]) unless the request names one, and the answer uses the same scheme, so a
client that sends the conversation back without ids still pairs every tool result with
its call. Both camelCase and snake_case spellings are accepted, as Google's API does.
"""

from __future__ import annotations

from typing import Any

import orjson

from localgate.errors import InvalidArgument

__all__ = ["call_id", "chat_request", "embeddings_request", "json_schema"]

# generationConfig fields with a direct counterpart.
_GENERATION = {
    "temperature": "temperature",
    "topP": "top_p",
    "maxOutputTokens": "max_tokens",
    "candidateCount": "n",
    "seed": "seed",
    "presencePenalty": "presence_penalty",
    "frequencyPenalty": "frequency_penalty",
}
# Gemini's Schema fields that mean the same in JSON Schema.
_SCHEMA_KEPT = frozenset(
    {
        "format",
        "description",
        "enum",
        "required",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "title",
        "default",
        "minProperties",
        "maxProperties",
    }
)
_REQUEST_FIELDS = frozenset(
    {"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "model"}
)


def call_id(turn: int, index: int) -> str:
    """The id of the ``index``-th function call of ``contents[turn]``."""
    return f"call_{turn}_{index}"


def chat_request(body: Any, model: str, *, stream: bool) -> dict[str, Any]:
    """A ``generateContent`` body as a ``/chat/completions`` body for ``model``."""
    body = _camel(_object(body, "the body"))
    for key in body:
        if key not in _REQUEST_FIELDS:
            raise _refused(key, _REFUSALS.get(key, "it has no OpenAI-compatible counterpart"))
    messages: list[dict[str, Any]] = []
    system = body.get("systemInstruction")
    if system is not None:
        messages.append({"role": "system", "content": _plain_text(system, "systemInstruction")})
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise InvalidArgument("contents: at least one content is required.")
    calls: list[tuple[str, str]] = []  # (name, id) of the previous model turn's calls
    for turn, content in enumerate(contents):
        where = f"contents[{turn}]"
        content = _camel(_object(content, where))
        for key in content:
            if key not in ("role", "parts"):
                raise _refused(f"{where}.{key}", "a content has a role and parts only")
        role = content.get("role", "user")
        parts = content.get("parts")
        if not isinstance(parts, list):
            raise InvalidArgument(f"{where}.parts: required (a list of parts).")
        if role == "model":
            message, calls = _assistant(parts, turn, where)
            messages.append(message)
        elif role in ("user", "function", "tool"):
            messages.extend(_user(parts, turn, where, calls))
            calls = []
        else:
            raise InvalidArgument(f"{where}.role: {role!r} is neither 'user' nor 'model'.")
    out: dict[str, Any] = {"model": model, "messages": messages, "stream": stream}
    if stream:
        out["stream_options"] = {"include_usage": True}
    if body.get("tools") is not None:
        out["tools"] = _tools(body["tools"])
    if body.get("toolConfig") is not None:
        choice = _tool_choice(body["toolConfig"])
        if choice is not None:
            out["tool_choice"] = choice
    if body.get("generationConfig") is not None:
        out.update(_generation(body["generationConfig"]))
    return out


def embeddings_request(requests: list[Any], model: str) -> dict[str, Any]:
    """``embedContent`` (one request) or ``batchEmbedContents`` bodies as one
    ``/embeddings`` body; each request is one input."""
    inputs: list[str] = []
    dimensions: int | None = None
    for index, request in enumerate(requests):
        where = f"requests[{index}]" if len(requests) > 1 else "the body"
        request = _camel(_object(request, where))
        prefix = f"{where}." if len(requests) > 1 else ""
        for key in request:
            if key not in ("content", "model", "outputDimensionality"):
                raise _refused(
                    f"{prefix}{key}",
                    "an OpenAI-compatible embedding server has no counterpart "
                    "(taskType and title would change nothing there)",
                )
        inputs.append(_plain_text(request.get("content"), f"{prefix}content"))
        wanted = request.get("outputDimensionality")
        if wanted is not None:
            if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted <= 0:
                raise InvalidArgument(f"{prefix}outputDimensionality: a positive integer.")
            if dimensions is not None and wanted != dimensions:
                raise InvalidArgument(
                    f"{prefix}outputDimensionality: every request of a batch must ask for "
                    "the same number of dimensions."
                )
            dimensions = wanted
    out: dict[str, Any] = {"model": model, "input": inputs, "encoding_format": "float"}
    if dimensions is not None:
        out["dimensions"] = dimensions
    return out


def json_schema(schema: Any, where: str) -> Any:
    """Gemini's OpenAPI-subset ``Schema`` as JSON Schema (upper-case types lowered,
    ``nullable`` as a null type); a field with no JSON Schema meaning is refused."""
    if not isinstance(schema, dict):
        raise InvalidArgument(f"{where}: a schema object.")
    out: dict[str, Any] = {}
    nullable = False
    for key, value in _camel(schema).items():
        if key == "type":
            if not isinstance(value, str):
                raise InvalidArgument(f"{where}.type: a type name such as OBJECT or STRING.")
            out["type"] = value.lower()
        elif key == "nullable":
            nullable = value is True
        elif key == "properties":
            out["properties"] = {
                name: json_schema(item, f"{where}.properties.{name}")
                for name, item in _object(value, f"{where}.properties").items()
            }
        elif key == "items":
            out["items"] = json_schema(value, f"{where}.items")
        elif key == "anyOf":
            if not isinstance(value, list):
                raise InvalidArgument(f"{where}.anyOf: a list of schemas.")
            out["anyOf"] = [
                json_schema(item, f"{where}.anyOf[{n}]") for n, item in enumerate(value)
            ]
        elif key == "additionalProperties":
            out[key] = value if isinstance(value, bool) else json_schema(value, f"{where}.{key}")
        elif key == "defs":
            out["$defs"] = {
                name: json_schema(item, f"{where}.defs.{name}")
                for name, item in _object(value, f"{where}.defs").items()
            }
        elif key == "ref":
            # Gemini points into its defs (#/defs/Name); JSON Schema into $defs.
            ref = _string(value, f"{where}.ref")
            out["$ref"] = (
                "#/$defs/" + ref.removeprefix("#/defs/") if ref.startswith("#/defs/") else ref
            )
        elif key == "propertyOrdering":
            continue  # Gemini's generation order hint; JSON Schema objects have none
        elif key in _SCHEMA_KEPT:
            out[key] = value
        else:
            raise _refused(f"{where}.{key}", "JSON Schema has no such keyword")
    if nullable and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


# -- contents -------------------------------------------------------------------------


def _assistant(
    parts: list[Any], turn: int, where: str
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    calls: list[tuple[str, str]] = []
    for index, part in enumerate(parts):
        part_where = f"{where}.parts[{index}]"
        part = _part(part, part_where)
        if part.get("thought") is True:
            continue  # the model's own reasoning summary: not part of what it said
        if "text" in part:
            texts.append(_string(part["text"], f"{part_where}.text"))
        elif "functionCall" in part:
            call = _camel(_object(part["functionCall"], f"{part_where}.functionCall"))
            name = _string(call.get("name"), f"{part_where}.functionCall.name")
            given = call.get("id")
            ident = given if isinstance(given, str) and given else call_id(turn, len(calls))
            args = call.get("args", {})
            tool_calls.append(
                {
                    "id": ident,
                    "type": "function",
                    "function": {"name": name, "arguments": _dumps(args)},
                }
            )
            calls.append((name, ident))
        else:
            _unsupported_part(part, part_where)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    elif message["content"] is None:
        message["content"] = ""
    return message, calls


def _user(
    parts: list[Any], turn: int, where: str, calls: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """Tool results first (they answer the previous turn's calls), then the user's content."""
    tools: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    unanswered = list(calls)
    for index, part in enumerate(parts):
        part_where = f"{where}.parts[{index}]"
        part = _part(part, part_where)
        if "text" in part:
            content.append({"type": "text", "text": _string(part["text"], f"{part_where}.text")})
        elif "inlineData" in part:
            content.append(_image(part["inlineData"], f"{part_where}.inlineData"))
        elif "functionResponse" in part:
            response = _camel(_object(part["functionResponse"], f"{part_where}.functionResponse"))
            name = _string(response.get("name"), f"{part_where}.functionResponse.name")
            given = response.get("id")
            if isinstance(given, str) and given:
                ident = given
                unanswered = [(n, i) for n, i in unanswered if i != given]
            else:
                match = next((pair for pair in unanswered if pair[0] == name), None)
                if match is not None:
                    unanswered.remove(match)
                    ident = match[1]
                else:
                    ident = call_id(turn, len(tools))
            tools.append(
                {"role": "tool", "tool_call_id": ident, "content": _dumps(response.get("response"))}
            )
        else:
            _unsupported_part(part, part_where)
    messages = tools
    if content:
        if all(item["type"] == "text" for item in content):
            messages.append({"role": "user", "content": "".join(i["text"] for i in content)})
        else:
            messages.append({"role": "user", "content": content})
    return messages


def _image(blob: Any, where: str) -> dict[str, Any]:
    blob = _camel(_object(blob, where))
    mime = blob.get("mimeType")
    data = blob.get("data")
    if not isinstance(mime, str) or not mime.startswith("image/"):
        raise _refused(
            f"{where}.mimeType",
            f"an OpenAI-compatible chat server takes inline images only, not {mime!r}",
        )
    if not isinstance(data, str):
        raise InvalidArgument(f"{where}.data: base64 data is required.")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


# The keys a part may have besides its one kind (text, inlineData, ...).
_PART_EXTRAS = frozenset({"thought", "thoughtSignature"})
_PART_KINDS = frozenset({"text", "inlineData", "functionCall", "functionResponse"})


def _part(value: Any, where: str) -> dict[str, Any]:
    """A part whose every key the translation carries (or knowingly leaves out)."""
    part = _camel(_object(value, where))
    for key in part:
        if key not in _PART_KINDS and key not in _PART_EXTRAS:
            _unsupported_part({key: part[key]}, where)
    return part


def _unsupported_part(part: dict[str, Any], where: str) -> None:
    kinds = [key for key in part if key not in ("thoughtSignature", "thought")]
    kind = kinds[0] if kinds else "(empty)"
    reason = {
        "fileData": "the server cannot fetch Gemini files; send images inline",
        "executableCode": "code execution is a Gemini tool",
        "codeExecutionResult": "code execution is a Gemini tool",
        "inlineData": "inline data is taken in user turns only",
        "functionCall": "function calls belong to model turns",
        "functionResponse": "function responses belong to user turns",
    }.get(kind, "it has no OpenAI-compatible counterpart")
    raise _refused(f"{where}.{kind}", reason)


# -- tools and configuration ------------------------------------------------------------


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise InvalidArgument("tools: a list of tools.")
    out: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        tool = _camel(_object(tool, where))
        for key, value in tool.items():
            if key != "functionDeclarations":
                raise _refused(f"{where}.{key}", "only function declarations can be offered")
            if not isinstance(value, list):
                raise InvalidArgument(f"{where}.functionDeclarations: a list.")
            for n, declaration in enumerate(value):
                out.append(_function(declaration, f"{where}.functionDeclarations[{n}]"))
    return out


def _function(declaration: Any, where: str) -> dict[str, Any]:
    declaration = _camel(_object(declaration, where))
    function: dict[str, Any] = {"name": _string(declaration.get("name"), f"{where}.name")}
    for key, value in declaration.items():
        if key == "name":
            continue
        if key == "description":
            function["description"] = _string(value, f"{where}.description")
        elif key == "parameters":
            function["parameters"] = json_schema(value, f"{where}.parameters")
        elif key == "parametersJsonSchema":
            function["parameters"] = value
        else:
            raise _refused(f"{where}.{key}", "OpenAI function definitions have no such field")
    return {"type": "function", "function": function}


def _tool_choice(config: Any) -> Any:
    config = _camel(_object(config, "toolConfig"))
    for key in config:
        if key != "functionCallingConfig":
            raise _refused(f"toolConfig.{key}", "it has no OpenAI-compatible counterpart")
    calling = config.get("functionCallingConfig")
    if calling is None:
        return None
    calling = _camel(_object(calling, "toolConfig.functionCallingConfig"))
    mode = str(calling.get("mode", "AUTO")).upper()
    allowed = calling.get("allowedFunctionNames") or []
    if mode in ("AUTO", "MODE_UNSPECIFIED"):
        choice: Any = "auto"
    elif mode == "NONE":
        choice = "none"
    elif mode in ("ANY", "VALIDATED"):
        choice = "required"
        if isinstance(allowed, list) and len(allowed) == 1:
            return {"type": "function", "function": {"name": allowed[0]}}
    else:
        raise InvalidArgument(f"toolConfig.functionCallingConfig.mode: unknown mode {mode!r}.")
    if allowed:
        raise _refused(
            "toolConfig.functionCallingConfig.allowedFunctionNames",
            "an OpenAI-compatible server can be held to one named function (with mode ANY), "
            "not to a list",
        )
    return choice


def _generation(config: Any) -> dict[str, Any]:
    config = _camel(_object(config, "generationConfig"))
    out: dict[str, Any] = {}
    mime = config.get("responseMimeType")
    schema = config.get("responseSchema")
    raw_schema = config.get("responseJsonSchema")
    for key, value in config.items():
        where = f"generationConfig.{key}"
        if key in _GENERATION:
            if value is not None:
                out[_GENERATION[key]] = value
        elif key == "stopSequences":
            if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
                raise InvalidArgument(f"{where}: a list of strings.")
            out["stop"] = value
        elif key in ("responseMimeType", "responseSchema", "responseJsonSchema"):
            continue
        elif key == "thinkingConfig":
            _no_thinking(value, where)
        elif key == "responseModalities":
            if value not in (["TEXT"], ["text"], []):
                raise _refused(where, "an OpenAI-compatible chat server answers text only")
        else:
            raise _refused(where, _REFUSALS.get(key, "it has no OpenAI-compatible counterpart"))
    if mime in (None, "text/plain"):
        if schema is not None or raw_schema is not None:
            raise InvalidArgument(
                "generationConfig.responseSchema: needs responseMimeType application/json."
            )
    elif mime == "application/json":
        if raw_schema is not None:
            out["response_format"] = _schema_format(raw_schema)
        elif schema is not None:
            out["response_format"] = _schema_format(
                json_schema(schema, "generationConfig.responseSchema")
            )
        else:
            out["response_format"] = {"type": "json_object"}
    else:
        raise _refused(
            "generationConfig.responseMimeType",
            f"{mime!r}: an OpenAI-compatible server answers text/plain or application/json",
        )
    return out


def _schema_format(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


def _no_thinking(value: Any, where: str) -> None:
    """A thinking configuration that asks for no thoughts is what the server does anyway;
    one that asks for thoughts or a budget cannot be honoured."""
    config = _camel(_object(value, where))
    budget = config.get("thinkingBudget")
    if config.get("includeThoughts") is True or (budget is not None and budget != 0):
        raise _refused(
            where,
            "an OpenAI-compatible server takes no thinking budget and returns no thoughts "
            "(send thinkingBudget 0, or leave thinkingConfig out)",
        )
    for key in config:
        if key not in ("includeThoughts", "thinkingBudget"):
            raise _refused(f"{where}.{key}", "it has no OpenAI-compatible counterpart")


_REFUSALS = {
    "cachedContent": "cached contents live on Google's servers, not on this one",
    "safetySettings": "an OpenAI-compatible server has no safety settings to apply",
    "labels": "labels are Vertex AI billing metadata",
    "topK": "the OpenAI API has no top_k",
    "responseLogprobs": "log probabilities are not translated",
    "logprobs": "log probabilities are not translated",
    "speechConfig": "an OpenAI-compatible chat server answers text only",
    "mediaResolution": "it has no OpenAI-compatible counterpart",
}


# -- small readers ----------------------------------------------------------------------


def _refused(field: str, reason: str) -> InvalidArgument:
    return InvalidArgument(
        f"{field}: not supported by this model's upstream (an OpenAI-compatible server): "
        f"{reason}. Leave it out, or ask the gateway operator for a Gemini model."
    )


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}: an object is required.")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{where}: a string is required.")
    return value


def _plain_text(content: Any, where: str) -> str:
    """The text of a content whose parts must all be text (system instruction, embeddings)."""
    if isinstance(content, str):
        return content
    content = _camel(_object(content, where))
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise InvalidArgument(f"{where}.parts: required (a list of parts).")
    texts = []
    for index, part in enumerate(parts):
        part = _camel(_object(part, f"{where}.parts[{index}]"))
        if "text" not in part:
            raise _refused(f"{where}.parts[{index}]", "only text parts can go here")
        texts.append(_string(part["text"], f"{where}.parts[{index}].text"))
    return "\n".join(texts)


def _dumps(value: Any) -> str:
    return orjson.dumps(value if value is not None else {}).decode()


def _camel(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` with snake_case keys spelled in camelCase (Google accepts both)."""
    if not any("_" in key for key in value):
        return value
    return {_to_camel(key): item for key, item in value.items()}


def _to_camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)
