"""Reading the YAML file, applying the environment, and describing what is wrong."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from localgate.config.settings import Settings
from localgate.errors import ConfigError
from localgate.secret import Secret

__all__ = ["load_settings"]

ENV_CONFIG = "LOCALGATE_CONFIG"
ENV_DATA_DIR = "LOCALGATE_DATA_DIR"
ENV_UPSTREAM_URL = "LOCALGATE_UPSTREAM_URL"
ENV_UPSTREAM_KEY = "GEMINI_API_KEY"
ENV_AUDIT_MASTER_KEY = "LOCALGATE_AUDIT_MASTER_KEY"
ENV_SIGNATURE_KEY = "LOCALGATE_SIGNATURE_KEY"
ENV_AUDIT_DSN = "LOCALGATE_AUDIT_POSTGRES_DSN"
ENV_DATABASE_URL = "LOCALGATE_DATABASE_URL"
ENV_CHROMA_TOKEN = "LOCALGATE_CHROMA_TOKEN"  # noqa: S105 - a variable's name, not a secret
ENV_REDIS_URL = "LOCALGATE_REDIS_URL"
# `localgate serve --workers N` hands its workers the store process it started this way.
ENV_CHROMA_URL = "LOCALGATE_CHROMA_URL"


def load_settings(
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    upstream_keys: bool = True,
) -> tuple[Settings, Path | None]:
    """Load, override from the environment and validate; returns the settings and the file used.

    Raises ``ConfigError`` listing every problem found. ``upstream_keys`` False: the upstream
    key files are not read (no upstream key in the settings), for a command that never calls
    an upstream and is run without the key (``localgate migrate``, a deployment's job).
    """
    env = os.environ if environ is None else environ
    if path is None and env.get(ENV_CONFIG):
        path = Path(env[ENV_CONFIG])
    source = str(path) if path else "<defaults>"
    raw = _read_yaml(path) if path else {}
    if "upstream_api_key" in raw or "chroma_token" in raw:
        raise ConfigError(
            source,
            [
                "upstream_api_key: not allowed in the file; "
                "use GEMINI_API_KEY or upstream.api_key_file"
            ],
        )
    _apply_environment(raw, env)
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(source, [_describe(err) for err in exc.errors()]) from exc
    token = env.get(ENV_CHROMA_TOKEN, "").strip()
    updates: dict[str, Any] = {
        "upstream_api_key": _upstream_key(settings, env, source) if upstream_keys else None,
        "chroma_token": Secret(token) if token else None,
        "upstream_keys": _named_upstream_keys(settings, env, source) if upstream_keys else {},
    }
    return settings.model_copy(update=updates), path


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the file: {exc.strerror}"]) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(str(path), [f"not valid YAML{where}: {problem}"]) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), ["the top level must be a mapping of sections"])
    return data


# Environment variables that set one setting of a section: (variable, section, setting).
_SECTION_ENVIRONMENT = (
    (ENV_AUDIT_DSN, "audit", "postgres_dsn"),
    (ENV_REDIS_URL, "limits", "redis_url"),
    (ENV_CHROMA_URL, "cache", "chroma_url"),
    (ENV_UPSTREAM_URL, "upstream", "base_url"),
)


def _apply_environment(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    if env.get(ENV_DATA_DIR):
        raw["data_dir"] = env[ENV_DATA_DIR]
    if env.get(ENV_DATABASE_URL):
        raw["database_url"] = env[ENV_DATABASE_URL]
    for variable, name, setting in _SECTION_ENVIRONMENT:
        if not env.get(variable):
            continue
        section = raw.get(name)
        if section is None:
            section = raw[name] = {}
        if isinstance(section, dict):  # else the file's own error is reported
            section[setting] = env[variable]


def _upstream_key(settings: Settings, env: Mapping[str, str], source: str) -> Secret | None:
    from_env = env.get(ENV_UPSTREAM_KEY, "").strip()
    if from_env:
        return Secret(from_env)
    key_file = settings.upstream.api_key_file
    if key_file is None:
        return None
    try:
        value = key_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(
            source, [f"upstream.api_key_file: cannot read {key_file}: {exc.strerror}"]
        ) from exc
    if not value:
        raise ConfigError(source, [f"upstream.api_key_file: {key_file} is empty"])
    return Secret(value)


def _named_upstream_keys(
    settings: Settings, env: Mapping[str, str], source: str
) -> dict[str, tuple[Secret, ...]]:
    """Each named upstream's keys: its environment variables', then its files' lines."""
    pools: dict[str, tuple[Secret, ...]] = {}
    for name, upstream in settings.upstreams.items():
        keys = [env.get(var, "").strip() for var in upstream.api_key_env]
        for index, key_file in enumerate(upstream.api_key_file):
            where = f"upstreams.{name}.api_key_file.{index}"
            try:
                lines = key_file.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise ConfigError(
                    source, [f"{where}: cannot read {key_file}: {exc.strerror}"]
                ) from exc
            if not any(line.strip() for line in lines):
                raise ConfigError(source, [f"{where}: {key_file} is empty"])
            keys += [line.strip() for line in lines]
        pools[name] = tuple(Secret(key) for key in dict.fromkeys(keys) if key)
    return pools


_REASONS = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than_equal": "must be <= {le}",
    "extra_forbidden": "unknown setting",
    "missing": "is required",
}


def _describe(error: Mapping[str, Any]) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "<top level>"
    template = _REASONS.get(error["type"])
    ctx = {
        name: f"{value:g}" if isinstance(value, float) else value
        for name, value in (error.get("ctx") or {}).items()
    }
    if template is not None:
        reason = template.format(**ctx)
    elif error["type"] == "value_error":
        reason = str(ctx.get("error", error["msg"]))
        head, _, rest = reason.partition(": ")
        # A check of a whole section (or file) names the field it is about.
        if rest and (not error["loc"] or head.startswith(f"{where}.")):
            where, reason = head, rest
    else:
        reason = str(error["msg"])
        reason = reason[:1].lower() + reason[1:]
    return f"{where}: {reason}"
