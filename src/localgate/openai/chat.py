"""A chat completions request translated to a Gemini ``generateContent`` request.

Every stage after the front door sees the Gemini request this builds, so redaction, the
cache, retrieval, limits and the audit trail work on it exactly as on a native request:
tool-call arguments become ``functionCall.args`` and tool results ``functionResponse``,
both scanned like any text; image parts become ``inlineData`` under the binary-data
policy. docs/openai.md has the mapping, field by field.

A parameter localgate cannot honour is refused with a 400 naming it, never dropped in
silence, unless ``openai.drop_unsupported`` says to drop it.

Tool-call ids: Gemini gives function calls none, so the answer gives each a deterministic
id (answers.py), and a tool message's ``tool_call_id`` is mapped back to its function's
name through the assistant message of the same conversation that made the call.
Thought signatures of Gemini 3 travel with the tool call in
``extra_content.google.thought_signature``, where Google's compatibility layer puts them
(and the ``openai`` SDK keeps unknown fields of a message it gets back).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from localgate.openai.errors import InvalidParameter

__all__ = [
    "CHAT_PARAMETERS",
    "MESSAGE_FIELDS",
    "REASONING_EFFORTS",
    "ChatRequest",
    "model_name",
    "translate_chat_request",
]

# The parameters of chat completions, and what becomes of each: "map" (translated),
# "ignore" (accepted, no effect on the answer: documented) or "refuse" (a 400 unless
# openai.drop_unsupported). A parameter not listed is refused as unknown likewise.
_SUPPORTED = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "n",
        "seed",
        "logprobs",
        "top_logprobs",
        "reasoning_effort",
        "user",
        "presence_penalty",
        "frequency_penalty",
        "store",
        "modalities",
    }
)
# The names, for the contract (openai/openapi.py): each must have a schema there.
CHAT_PARAMETERS = _SUPPORTED
# A model name: what Google's names use, as on the native routes (gemini.routes).
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)(?:;[^,;]*)*;base64,(?P<data>.*)", re.S)
_AUDIO_TYPES = {"wav": "audio/wav", "mp3": "audio/mp3"}
_THINKING_BUDGETS = {"none": 0, "minimal": 512, "low": 1024, "medium": 8192, "high": 24576}
REASONING_EFFORTS = tuple(_THINKING_BUDGETS)  # for the contract
_THINKING_LEVELS = {"none": "minimal", "minimal": "minimal", "low": "low", "medium": "medium"}


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """The translated request: the Gemini body and what the door needs for the answer."""

    model: str
    body: dict[str, Any]
    stream: bool
    include_usage: bool
    user: str | None


def translate_chat_request(request: Any, *, drop_unsupported: bool = False) -> ChatRequest:
    """The Gemini request for an OpenAI chat completions request; raises ``InvalidParameter``."""
    if not isinstance(request, dict):
        raise InvalidParameter("The request body must be a JSON object.", "body")
    for name in request:
        if name not in _SUPPORTED and not drop_unsupported:
            raise InvalidParameter(
                f"The parameter '{name}' is not supported by localgate's OpenAI-compatible "
                "endpoint (see docs/openai.md); remove it, or have the operator set "
                "openai.drop_unsupported.",
                name,
                "unsupported_parameter",
            )
    model = model_name(request.get("model"))
    stream = _optional(request, "stream", bool) or False
    include_usage = False
    options = _optional(request, "stream_options", dict)
    if options is not None:
        if not stream:
            raise InvalidParameter(
                "'stream_options' is only allowed when 'stream' is true.", "stream_options"
            )
        include_usage = bool(_optional(options, "include_usage", bool, "stream_options."))
    user = _optional(request, "user", str)
    if request.get("store") is True and not drop_unsupported:
        raise InvalidParameter(
            "'store': true is not supported: localgate stores nothing for later retrieval.",
            "store",
            "unsupported_value",
        )
    modalities = _optional(request, "modalities", list)
    if modalities is not None and modalities != ["text"] and not drop_unsupported:
        raise InvalidParameter(
            "Only text output is supported ('modalities': ['text']).",
            "modalities",
            "unsupported_value",
        )
    system, contents = _messages(request.get("messages"), drop_unsupported)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": system}
    tools = _tools(request)
    if tools is not None:
        body["tools"] = tools
    tool_config = _tool_choice(request, drop_unsupported)
    if tool_config is not None:
        body["toolConfig"] = tool_config
    config = _generation_config(request, model)
    if config:
        body["generationConfig"] = config
    return ChatRequest(
        model=model, body=body, stream=stream, include_usage=include_usage, user=user
    )


# -- parameters ---------------------------------------------------------------------------


def _optional(
    holder: dict[str, Any], name: str, kind: type | tuple[type, ...], prefix: str = ""
) -> Any:
    value = holder.get(name)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        expected = {"str": "a string", "bool": "a boolean", "dict": "an object"}.get(names, names)
        raise InvalidParameter(
            f"Invalid type for '{prefix}{name}': expected {expected}.",
            prefix + name,
            "invalid_type",
        )
    return value


def _number(request: dict[str, Any], name: str, low: float, high: float | None) -> float | None:
    value = _optional(request, name, (int, float))
    if value is None:
        return None
    if value < low or (high is not None and value > high):
        bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise InvalidParameter(f"'{name}' must be {bound}, got {value}.", name)
    return value  # type: ignore[no-any-return]


def model_name(value: Any) -> str:
    """The model a request names, without a `models/` prefix; raises `InvalidParameter`."""
    if not isinstance(value, str) or not value:
        raise InvalidParameter("'model' is required: name a model, e.g. gemini-2.5-flash.", "model")
    name = value.removeprefix("models/")
    if not _MODEL_NAME.fullmatch(name):
        # The value is not repeated: it may be anything, personal data included.
        raise InvalidParameter(
            "'model' is not a valid model name: use letters, digits, '.', '-', '_' and '@' "
            "(at most 128 characters), e.g. gemini-2.5-flash.",
            "model",
        )
    return name


def _generation_config(request: dict[str, Any], model: str) -> dict[str, Any]:
    config: dict[str, Any] = {}
    max_tokens = _optional(request, "max_tokens", int)
    max_completion = _optional(request, "max_completion_tokens", int)
    if max_tokens is not None and max_completion is not None and max_tokens != max_completion:
        raise InvalidParameter(
            "Give 'max_completion_tokens' or 'max_tokens', not both.", "max_tokens"
        )
    limit = max_completion if max_completion is not None else max_tokens
    if limit is not None:
        if limit < 1:
            param = "max_completion_tokens" if max_completion is not None else "max_tokens"
            raise InvalidParameter(f"'{param}' must be at least 1.", param)
        config["maxOutputTokens"] = limit
    for name, field, low, high in (
        ("temperature", "temperature", 0.0, 2.0),
        ("top_p", "topP", 0.0, 1.0),
        ("presence_penalty", "presencePenalty", -2.0, 2.0),
        ("frequency_penalty", "frequencyPenalty", -2.0, 2.0),
    ):
        value = _number(request, name, low, high)
        if value is not None:
            config[field] = value
    stop = request.get("stop")
    if isinstance(stop, str):
        config["stopSequences"] = [stop]
    elif isinstance(stop, list) and all(isinstance(item, str) for item in stop):
        if len(stop) > 5:
            raise InvalidParameter("'stop' takes at most 5 sequences.", "stop")
        if stop:
            config["stopSequences"] = stop
    elif stop is not None:
        raise InvalidParameter("'stop' must be a string or a list of strings.", "stop")
    n = _optional(request, "n", int)
    if n is not None:
        if not 1 <= n <= 8:
            raise InvalidParameter("'n' must be between 1 and 8.", "n")
        if n > 1:
            config["candidateCount"] = n
    seed = _optional(request, "seed", int)
    if seed is not None:
        config["seed"] = seed
    logprobs = _optional(request, "logprobs", bool)
    top_logprobs = _optional(request, "top_logprobs", int)
    if top_logprobs is not None:
        if not logprobs:
            raise InvalidParameter("'top_logprobs' requires 'logprobs': true.", "top_logprobs")
        if not 0 <= top_logprobs <= 20:
            raise InvalidParameter("'top_logprobs' must be between 0 and 20.", "top_logprobs")
    if logprobs:
        config["responseLogprobs"] = True
        if top_logprobs:
            config["logprobs"] = top_logprobs
    effort = _optional(request, "reasoning_effort", str)
    if effort is not None:
        config["thinkingConfig"] = _thinking(effort, model)
    response_format = _optional(request, "response_format", dict)
    if response_format is not None:
        config.update(_response_format(response_format))
    return config


def _thinking(effort: str, model: str) -> dict[str, Any]:
    if effort not in _THINKING_BUDGETS:
        raise InvalidParameter(
            "'reasoning_effort' must be one of none, minimal, low, medium, high.",
            "reasoning_effort",
        )
    if model.startswith("gemini-3"):
        # Gemini 3 takes a level and cannot switch thinking off: "none" is its least.
        return {"thinkingLevel": _THINKING_LEVELS.get(effort, "high")}
    return {"thinkingBudget": _THINKING_BUDGETS[effort]}


def _response_format(response_format: dict[str, Any]) -> dict[str, Any]:
    kind = response_format.get("type")
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"responseMimeType": "application/json"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise InvalidParameter(
                "'response_format.json_schema' must be an object with a 'name'.",
                "response_format.json_schema",
            )
        schema = spec.get("schema")
        if schema is None:
            return {"responseMimeType": "application/json"}
        if not isinstance(schema, dict):
            raise InvalidParameter(
                "'response_format.json_schema.schema' must be a JSON Schema object.",
                "response_format.json_schema.schema",
            )
        return {"responseMimeType": "application/json", "responseJsonSchema": schema}
    raise InvalidParameter(
        "'response_format.type' must be text, json_object or json_schema.",
        "response_format.type",
    )


# -- tools --------------------------------------------------------------------------------


def _tools(request: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = _optional(request, "tools", list)
    if not tools:
        return None
    declarations: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise InvalidParameter(
                f"'{where}.type' must be 'function': only function tools are supported.",
                f"{where}.type",
                "unsupported_value",
            )
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidParameter(
                f"'{where}.function' must be an object with a 'name'.", f"{where}.function"
            )
        declaration: dict[str, Any] = {"name": function["name"]}
        description = function.get("description")
        if isinstance(description, str):
            declaration["description"] = description
        parameters = function.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise InvalidParameter(
                    f"'{where}.function.parameters' must be a JSON Schema object.",
                    f"{where}.function.parameters",
                )
            declaration["parametersJsonSchema"] = parameters
        declarations.append(declaration)
    return [{"functionDeclarations": declarations}]


def _tool_choice(request: dict[str, Any], drop_unsupported: bool) -> dict[str, Any] | None:
    if request.get("parallel_tool_calls") is False and not drop_unsupported:
        raise InvalidParameter(
            "'parallel_tool_calls': false is not supported: Gemini may always call several "
            "functions at once.",
            "parallel_tool_calls",
            "unsupported_value",
        )
    choice = request.get("tool_choice")
    if choice is None:
        return None
    modes = {"none": "NONE", "auto": "AUTO", "required": "ANY"}
    if isinstance(choice, str) and choice in modes:
        return {"functionCallingConfig": {"mode": modes[choice]}}
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return {
                "functionCallingConfig": {
                    "mode": "ANY",
                    "allowedFunctionNames": [function["name"]],
                }
            }
    raise InvalidParameter(
        "'tool_choice' must be none, auto, required or "
        '{"type": "function", "function": {"name": ...}}.',
        "tool_choice",
    )


# -- messages -----------------------------------------------------------------------------


def _messages(
    messages: Any, drop_unsupported: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The system instruction's parts and the conversation's turns."""
    if not isinstance(messages, list) or not messages:
        raise InvalidParameter("'messages' must be a non-empty array.", "messages")
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    calls: dict[str, str] = {}  # tool_call_id -> function name, from the assistant turns
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise InvalidParameter(f"'{where}' must be an object.", where)
        role = message.get("role")
        known = _MESSAGE_FIELDS.get(role)
        for name in message:
            if known is not None and name not in known and not drop_unsupported:
                raise InvalidParameter(
                    f"'{where}.{name}' is not supported on a {role} message.",
                    f"{where}.{name}",
                    "unsupported_parameter",
                )
        if role in ("system", "developer"):
            system += _text_parts(message.get("content"), f"{where}.content")
        elif role == "user":
            parts = _user_parts(message.get("content"), f"{where}.content")
            _append(contents, "user", parts)
        elif role == "assistant":
            parts = _assistant_parts(message, where, calls)
            _append(contents, "model", parts)
        elif role == "tool":
            _append(contents, "user", [_tool_result(message, where, calls)])
        else:
            raise InvalidParameter(
                f"'{where}.role' must be system, developer, user, assistant or tool.",
                f"{where}.role",
            )
    if not contents:
        raise InvalidParameter(
            "'messages' must hold at least one user, assistant or tool message.", "messages"
        )
    return system, contents


_MESSAGE_FIELDS: dict[Any, frozenset[str]] = {
    "system": frozenset({"role", "content"}),
    "developer": frozenset({"role", "content"}),
    "user": frozenset({"role", "content"}),
    "assistant": frozenset({"role", "content", "tool_calls", "refusal", "extra_content"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}


def _append(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    """Add a turn; parts of consecutive messages of one role share a turn (a model turn's
    parallel calls and the tool messages answering them must each be one turn)."""
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"] += parts
    else:
        contents.append({"role": role, "parts": parts})


def _text_parts(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    if isinstance(content, list):
        parts = []
        for index, item in enumerate(content):
            if not isinstance(item, dict) or item.get("type") != "text":
                raise InvalidParameter(
                    f"'{where}[{index}]' must be a text part here.", f"{where}[{index}]"
                )
            text = item.get("text")
            if not isinstance(text, str):
                raise InvalidParameter(
                    f"'{where}[{index}].text' must be a string.", f"{where}[{index}].text"
                )
            if text:
                parts.append({"text": text})
        return parts
    if content is None:
        return []
    raise InvalidParameter(f"'{where}' must be a string or an array of parts.", where)


def _user_parts(content: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        parts = _text_parts(content, where)
        if not parts:
            raise InvalidParameter(f"'{where}' must not be empty.", where)
        return parts
    out: list[dict[str, Any]] = []
    for index, item in enumerate(content):
        here = f"{where}[{index}]"
        kind = item.get("type") if isinstance(item, dict) else None
        converter = _PART_CONVERTERS.get(kind)  # type: ignore[arg-type]
        if converter is None:
            raise InvalidParameter(
                f"'{here}.type' must be text, image_url, input_audio or file.",
                f"{here}.type",
                "unsupported_value",
            )
        part = converter(item, here)
        if part is not None:
            out.append(part)
    if not out:
        raise InvalidParameter(f"'{where}' must not be empty.", where)
    return out


def _text_item(item: dict[str, Any], where: str) -> dict[str, Any] | None:
    text = item.get("text")
    if not isinstance(text, str):
        raise InvalidParameter(f"'{where}.text' must be a string.", f"{where}.text")
    return {"text": text} if text else None


def _inline(url: Any, where: str) -> dict[str, Any]:
    """A data URL as inline data; any other URL as file data, which the binary-data policy
    judges like a native request's (localgate fetches nothing)."""
    if not isinstance(url, str) or not url:
        raise InvalidParameter(f"'{where}' must be a URL.", where)
    found = _DATA_URL.fullmatch(url)
    if found is not None:
        return {"inlineData": {"mimeType": found["mime"], "data": found["data"]}}
    if url.startswith("data:"):
        raise InvalidParameter(
            f"'{where}' must be a base64 data URL (data:<type>;base64,<data>).", where
        )
    return {"fileData": {"fileUri": url}}


def _image_item(item: dict[str, Any], where: str) -> dict[str, Any]:
    image = item.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    return _inline(url, f"{where}.image_url.url")


def _audio_item(item: dict[str, Any], where: str) -> dict[str, Any]:
    audio = item.get("input_audio")
    if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
        raise InvalidParameter(
            f"'{where}.input_audio' must be an object with 'data' and 'format'.",
            f"{where}.input_audio",
        )
    mime = _AUDIO_TYPES.get(audio.get("format"))  # type: ignore[arg-type]
    if mime is None:
        raise InvalidParameter(
            f"'{where}.input_audio.format' must be wav or mp3.", f"{where}.input_audio.format"
        )
    return {"inlineData": {"mimeType": mime, "data": audio["data"]}}


def _file_item(item: dict[str, Any], where: str) -> dict[str, Any]:
    file = item.get("file")
    if not isinstance(file, dict) or not isinstance(file.get("file_data"), str):
        raise InvalidParameter(
            f"'{where}.file.file_data' is required: uploaded files ('file_id') would bypass "
            "redaction; send the file inline as a data URL.",
            f"{where}.file",
            "unsupported_value",
        )
    return _inline(file["file_data"], f"{where}.file.file_data")


_PART_CONVERTERS: dict[str, Callable[[dict[str, Any], str], dict[str, Any] | None]] = {
    "text": _text_item,
    "image_url": _image_item,
    "input_audio": _audio_item,
    "file": _file_item,
}


def _signature(holder: Any) -> str | None:
    """``extra_content.google.thought_signature`` of a tool call or message, if any."""
    if not isinstance(holder, dict):
        return None
    extra = holder.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    signature = google.get("thought_signature") if isinstance(google, dict) else None
    return signature if isinstance(signature, str) else None


def _assistant_parts(
    message: dict[str, Any], where: str, calls: dict[str, str]
) -> list[dict[str, Any]]:
    content = message.get("content")
    parts: list[dict[str, Any]] = []
    if isinstance(content, list):
        for index, item in enumerate(content):
            here = f"{where}.content[{index}]"
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "refusal":
                continue  # a refusal is not a turn of the model's to send back
            if kind != "text":
                raise InvalidParameter(f"'{here}.type' must be text or refusal.", f"{here}.type")
            text = _text_item(item, here)
            if text is not None:
                parts.append(text)
    else:
        parts += _text_parts(content, f"{where}.content")
    signature = _signature(message)
    if signature is not None and parts:
        parts[0]["thoughtSignature"] = signature
    tool_calls = message.get("tool_calls")
    if tool_calls is None:
        return parts
    if not isinstance(tool_calls, list):
        raise InvalidParameter(f"'{where}.tool_calls' must be an array.", f"{where}.tool_calls")
    for index, call in enumerate(tool_calls):
        here = f"{where}.tool_calls[{index}]"
        function = call.get("function") if isinstance(call, dict) else None
        call_id = call.get("id") if isinstance(call, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(call_id, str)
        ):
            raise InvalidParameter(
                f"'{here}' must have an 'id' and a 'function' with a 'name'.", here
            )
        arguments = function.get("arguments") or "{}"
        try:
            args = orjson.loads(arguments) if isinstance(arguments, str) else None
        except orjson.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            raise InvalidParameter(
                f"'{here}.function.arguments' must be a JSON object, as a string.",
                f"{here}.function.arguments",
            )
        calls[call_id] = function["name"]
        part: dict[str, Any] = {"functionCall": {"name": function["name"], "args": args}}
        signature = _signature(call)
        if signature is not None:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _tool_result(message: dict[str, Any], where: str, calls: dict[str, str]) -> dict[str, Any]:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or call_id not in calls:
        raise InvalidParameter(
            f"'{where}.tool_call_id' must be the id of a tool call of an earlier assistant "
            "message in 'messages'.",
            f"{where}.tool_call_id",
        )
    text = "".join(part["text"] for part in _text_parts(message.get("content"), f"{where}.content"))
    return {"functionResponse": {"name": calls[call_id], "response": {"content": text}}}


# For the contract (openai/openapi.py): which fields each role's message may carry.
MESSAGE_FIELDS = _MESSAGE_FIELDS
