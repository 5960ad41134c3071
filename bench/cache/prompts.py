"""Requests as the benchmark sends them, and as the cache sees them once redacted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localgate.cache.keys import CacheKey, cache_key
from localgate.config import Settings, load_settings
from localgate.gemini.routes import GeminiMethod, match_route
from localgate.redaction.request import redact_request_body
from localgate.redaction.stage import build_detector, new_session

__all__ = ["GENERATE", "MODEL", "ROUTE", "UPSTREAM_KEY", "Redactor", "ask", "default_settings"]

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
ROUTE = match_route("POST", GENERATE)
MODEL = f"{ROUTE.collection}/{ROUTE.model_id}"
UPSTREAM_KEY = "bench-upstream-key"  # the fake upstream accepts any key


def ask(text: str, *, temperature: float | None = 0) -> dict[str, Any]:
    """A generateContent body with one user turn."""
    body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    if temperature is not None:
        body["generationConfig"] = {"temperature": temperature}
    return body


class Redactor:
    """The gateway's default redaction, applied here to see requests as the cache sees them."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._policy = settings.proxy.redaction
        self._detector = build_detector(settings, self._policy)

    def text(self, text: str) -> str:
        """The redacted form of one question."""
        return self._redact(text)[0]

    def relation(self, seed: str, question: str) -> str:
        """What tells ``question`` apart from ``seed`` once both are redacted (temperature 0).

        "same request": nothing; "anchors differ": a number, placeholder or value let
        through, which the semantic layer never crosses; "embedder": only the words, so
        the threshold decides.
        """
        first, second = (self._key(text) for text in (seed, question))
        if first.exact == second.exact:
            return "same request"
        if first.fingerprint != second.fingerprint:
            return "anchors differ"
        return "embedder"

    def _redact(self, text: str) -> tuple[str, frozenset[str]]:
        session = new_session(self._settings, self._policy, self._detector)
        body = redact_request_body(GeminiMethod.GENERATE_CONTENT, ask(text), session)
        return str(body["contents"][0]["parts"][0]["text"]), frozenset(session.allowed_values)

    def _key(self, text: str) -> CacheKey:
        redacted, kept = self._redact(text)
        return cache_key(ask(redacted), MODEL, self._settings.cache, kept)


def default_settings(folder: Path, config: str = "") -> Settings:
    """Settings loaded as the gateway loads them, from ``config`` (defaults when empty)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "settings.yaml"
    path.write_text(config, encoding="utf-8")
    environ = {"LOCALGATE_DATA_DIR": str(folder / "data"), "GEMINI_API_KEY": UPSTREAM_KEY}
    settings, _ = load_settings(path, environ)
    return settings
