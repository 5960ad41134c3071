"""Upstreams, routes, retries and circuit breakers (docs/traffic.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from localgate.config.base import Section

__all__ = [
    "DEFAULT_UPSTREAM",
    "UPSTREAM_NAME",
    "CircuitBreakerSettings",
    "EgressSettings",
    "NamedUpstreamSettings",
    "RetrySettings",
    "RouteSettings",
    "SplitSettings",
    "UpstreamSettings",
]


def _proxy_url(value: str | None) -> str | None:
    if value is None or value == "direct":
        return value
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// proxy URL with a host, or 'direct'")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("a proxy URL has no path, query or fragment")
    return value


class EgressSettings(Section):
    """How the gateway reaches an upstream over the network (docs/tls.md)."""

    # The CAs trusted for the upstream's certificate, instead of the system's (a
    # corporate TLS-inspecting proxy's CA, a private upstream's CA).
    ca_file: Path | None = None
    # The proxy to reach the upstream through: an HTTP(S) proxy taking CONNECT, or
    # "direct" for none. Unset: HTTPS_PROXY / HTTP_PROXY / NO_PROXY from the environment.
    proxy_url: str | None = None
    # A client certificate (PEM) and its key, shown to the upstream (never inherited by
    # the upstreams: section).
    client_cert_file: Path | None = None
    client_key_file: Path | None = None

    @field_validator("proxy_url")
    @classmethod
    def _proxy(cls, value: str | None) -> str | None:
        return _proxy_url(value)

    @model_validator(mode="after")
    def _key_with_certificate(self) -> EgressSettings:
        if self.client_key_file is not None and self.client_cert_file is None:
            raise ValueError("client_key_file: needs client_cert_file as well")
        return self


class UpstreamSettings(EgressSettings):
    """The default Gemini upstream."""

    base_url: str = "https://generativelanguage.googleapis.com"
    api_key_file: Path | None = None
    connect_timeout_s: float = Field(10.0, gt=0)
    timeout_s: float = Field(600.0, gt=0)
    max_connections: int = Field(256, gt=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment:
            raise ValueError("must not have a query or fragment")
        if parts.username or parts.password:
            raise ValueError(
                "must not contain a user name or password; the upstream key goes in "
                "GEMINI_API_KEY or upstream.api_key_file"
            )
        return value.rstrip("/")


UPSTREAM_NAME = r"^[a-z][a-z0-9_-]{0,62}$"
_ENV_NAME = r"^[A-Z_][A-Z0-9_]*$"
_MODEL_NAME = r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}"
# The upstream the ``upstream:`` section describes.
DEFAULT_UPSTREAM = "default"


class NamedUpstreamSettings(EgressSettings):
    """An upstream under ``upstreams.<name>``; built at start (changes need a restart).

    ``ca_file`` and ``proxy_url`` left unset are the ``upstream:`` section's; the client
    certificate is its own only.
    """

    kind: Literal["gemini", "vertex", "openai"] = "gemini"
    # Required for gemini and openai; for vertex, default
    # https://{location}-aiplatform.googleapis.com. For openai, the URL the OpenAI SDK
    # would take as its base_url (http://vllm:8000/v1, http://ollama:11434/v1).
    base_url: str | None = None
    # Vertex AI: the project, the region, and the service account's JSON key file.
    project: str | None = Field(None, pattern=r"^[a-z][a-z0-9-]{4,61}[a-z0-9]$")
    location: str | None = Field(None, pattern=r"^[a-z]+(?:-[a-z]+[0-9]+)?$")
    credentials_file: Path | None = None
    # Environment variables holding its Google API keys, and files holding one key per
    # line: every key found joins the upstream's pool, used round-robin.
    api_key_env: tuple[str, ...] = ()
    api_key_file: tuple[Path, ...] = ()
    connect_timeout_s: float = Field(10.0, gt=0)
    timeout_s: float = Field(600.0, gt=0)
    max_connections: int = Field(256, gt=0)
    # A key the upstream answered 429 is left out of the rotation for the upstream's
    # Retry-After, or this long when it gave none.
    key_cooldown_s: float = Field(60.0, gt=0)
    # kind: openai (docs/openai-upstreams.md). The Gemini model names clients ask for, each
    # with the name the server knows it by; empty: names are passed on unchanged.
    models: dict[str, str] = Field(default_factory=dict)
    # Whether requests routed here are redacted. Only an openai upstream (a model the
    # company runs itself) may say false, and a request skips redaction only when every
    # upstream it may reach (its fallbacks included) says false.
    redaction: bool = True
    # How long /readyz and models.list reuse the answer of the server's GET /models.
    probe_interval_s: float = Field(30.0, gt=0)

    @field_validator("api_key_env", "api_key_file", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("models")
    @classmethod
    def _model_names(cls, value: dict[str, str]) -> dict[str, str]:
        for gemini_name, local_name in value.items():
            if not re.fullmatch(_MODEL_NAME, gemini_name):
                raise ValueError(
                    f"{gemini_name!r} is not a model name a client can ask for (letters, "
                    "digits, '.', '-', '_', '@')"
                )
            if not local_name or len(local_name) > 256 or not local_name.isprintable():
                raise ValueError(f"the server's name for {gemini_name!r} is empty or unprintable")
        return value

    @model_validator(mode="after")
    def _what_its_kind_needs(self) -> NamedUpstreamSettings:
        if self.kind != "openai" and (self.models or not self.redaction):
            raise ValueError(
                "models and redaction are for kind: openai upstreams; a Gemini or Vertex AI "
                "upstream always gets redacted requests"
            )
        if self.kind == "openai":
            if self.base_url is None:
                raise ValueError("base_url is required for kind: openai")
            if self.project or self.location or self.credentials_file:
                raise ValueError(
                    "project, location and credentials_file are for kind: vertex upstreams"
                )
            return self
        if self.kind == "gemini":
            if self.base_url is None:
                raise ValueError("base_url is required for kind: gemini")
            if self.project or self.location or self.credentials_file:
                raise ValueError(
                    "project, location and credentials_file are for kind: vertex upstreams"
                )
            return self
        missing = [
            name
            for name in ("project", "location", "credentials_file")
            if getattr(self, name) is None
        ]
        if missing:
            raise ValueError(f"{missing[0]} is required for kind: vertex")
        if self.api_key_env or self.api_key_file:
            raise ValueError(
                "api_key_env and api_key_file are for kind: gemini and openai upstreams"
            )
        return self

    @property
    def url(self) -> str:
        """The base URL: as configured, or Vertex AI's regional endpoint."""
        return self.base_url or f"https://{self.location}-aiplatform.googleapis.com"

    @field_validator("api_key_env")
    @classmethod
    def _env_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not re.fullmatch(_ENV_NAME, name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(
                "must not have a query, a fragment or credentials; keys go in api_key_env "
                "or api_key_file"
            )
        return value.rstrip("/")


class SplitSettings(Section):
    """One side of a route's weighted split (a canary, an A/B test): another upstream, another
    model, or both; what it leaves out is the route's own (a side naming neither is the
    control group)."""

    upstream: str | None = None
    model: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
    weight: int = Field(ge=0, le=1_000_000)


class RouteSettings(Section):
    """One entry of ``routes:``: which requests it takes and where they go."""

    # Model names (without ``models/``), shell-style globs: gemini-2.5-*, *embedding*.
    models: tuple[str, ...] = ("*",)
    # Only these tenants' requests; empty: everyone's.
    tenants: tuple[str, ...] = ()
    upstream: str = DEFAULT_UPSTREAM
    # Tried in order when the upstream fails (unreachable, 429, 500, 503, 504, open circuit).
    fallback: tuple[str, ...] = ()
    # The model actually asked for: an alias (gemini-flash) or a pinned version.
    model: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
    # Weighted sides (canary, A/B); a tenant (or, with sticky: user, each x-localgate-user)
    # always gets the same side while the weights stay.
    split: tuple[SplitSettings, ...] = ()
    sticky: Literal["tenant", "user"] = "tenant"
    # Quality (docs/quality.md): this route's low-confidence threshold (else
    # quality.min_avg_logprob), and the stronger model a unary answer below it is asked
    # again on before the client gets it (streams are only marked).
    min_avg_logprob: float | None = Field(None, le=0)
    retry_low_confidence_on: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$"
    )

    @model_validator(mode="after")
    def _some_weight(self) -> RouteSettings:
        if self.split and not sum(side.weight for side in self.split):
            raise ValueError("split: the weights add up to 0")
        return self

    @field_validator("models", "tenants", "fallback", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("models")
    @classmethod
    def _some_models(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or any(not pattern for pattern in value):
            raise ValueError("needs at least one model name or glob")
        return value

    @property
    def chain(self) -> tuple[str, ...]:
        """The upstream, then its fallbacks, in the order they are tried."""
        return (self.upstream, *self.fallback)

    def chain_of(self, side: SplitSettings) -> tuple[str, ...]:
        """The chain of one side of the split: its upstream, then the route's fallbacks
        (without its own upstream again)."""
        first = side.upstream or self.upstream
        return (first, *(name for name in self.fallback if name != first))


class RetrySettings(Section):
    """How often and how fast a failed upstream call is tried again, here or elsewhere."""

    # Attempts one request may make, over all of its upstreams (1: no retry, no fallback).
    max_attempts: int = Field(3, ge=1, le=10)
    # Attempts on one upstream before the next one in the route's fallback list is tried.
    attempts_per_upstream: int = Field(2, ge=1, le=10)
    # Exponential backoff with full jitter between attempts on the same upstream.
    backoff_initial_s: float = Field(0.25, ge=0)
    backoff_max_s: float = Field(4.0, ge=0)
    # An upstream that asks for a longer wait (Retry-After) is not waited for: the next
    # upstream is tried, or the client gets the upstream's answer.
    max_wait_s: float = Field(10.0, ge=0)
    # Retries to an upstream stay within this fraction of its requests over the last
    # budget_window_s, plus budget_min_retries: a failing upstream is not hammered.
    budget_ratio: float = Field(0.2, ge=0, le=1)
    budget_window_s: float = Field(10.0, gt=0)
    budget_min_retries: int = Field(3, ge=0)


class CircuitBreakerSettings(Section):
    """When an upstream is skipped for a while (per upstream; per process, or shared by the
    replicas through Redis with limits.backend: redis)."""

    enabled: bool = True
    # Open when at least this fraction of the calls in the window failed ...
    failure_ratio: float = Field(0.5, gt=0, le=1)
    window_s: float = Field(30.0, gt=0)
    # ... and the window holds at least this many calls.
    min_requests: int = Field(10, ge=1)
    # Then skip the upstream this long, and let one probe through.
    open_s: float = Field(30.0, gt=0)
    # With limits.backend: redis the replicas share their breakers: how often each one adds
    # its calls to the shared window and learns whether another replica opened a breaker.
    sync_interval_s: float = Field(1.0, gt=0, le=60)
