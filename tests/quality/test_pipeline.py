"""The quality stage inside the pipeline: prompt drift sees only what redaction left, and a
refused or cached request is not counted."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from localgate.config import QualitySettings
from localgate.errors import InvalidArgument
from localgate.exchange.context import RequestContext
from localgate.identity.stage import IdentityStage
from localgate.observability import AccessLog, GatewayMetrics
from localgate.pipeline import Pipeline
from localgate.quality import QualityStage
from localgate.upstream import UpstreamDispatcher
from localgate.vectorstore.embedders import Vectors
from tests.pipeline.fakes import (
    POLICIES,
    Audit,
    Cache,
    Keys,
    Limits,
    Redaction,
    _ChainRouter,
    inbound,
    new_context,
)
from tests.upstream.fakes import ScriptedUpstream

SECRET = "13812345678"


class _Redacting(Redaction):
    """Replaces the phone number as the real stage would, or refuses when told."""

    def redact_request(self, ctx: RequestContext, query: Sequence[tuple[str, str]] = ()) -> None:
        super().redact_request(ctx, query)
        for content in ctx.body["contents"]:
            for part in content["parts"]:
                part["text"] = part["text"].replace(SECRET, "[PHONE_1]")


def _pipeline(
    tmp_path: Path, embedded: list[str]
) -> tuple[Pipeline, QualityStage, _Redacting, Cache]:
    class Recording:
        name = space = "recording"
        dimensions = 2

        def embed(self, texts: Sequence[str]) -> Vectors:
            embedded.extend(texts)
            return np.full((len(texts), 2), 0.5**0.5, dtype=np.float32)

    journal: list[str] = []
    quality = QualityStage(
        QualitySettings.model_validate(
            {"drift": {"prompts": {"enabled": True, "tenants": ["acme"], "sample_rate": 1}}}
        ),
        embedder=Recording,
    )
    redaction = _Redacting(journal)
    cache = Cache(journal)
    pipeline = Pipeline(
        identity=IdentityStage(Keys(journal), lambda: POLICIES),
        limits=Limits(journal),
        redaction=redaction,
        cache=cache,
        audit=Audit(journal),
        dispatcher=UpstreamDispatcher(_ChainRouter(ScriptedUpstream(), None)),
        access_log=AccessLog(tmp_path / "access.log"),
        metrics=GatewayMetrics(),
        quality=quality,
    )
    return pipeline, quality, redaction, cache


def body(text: str) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}]}


def test_prompt_drift_embeds_the_redacted_prompt_never_the_original(tmp_path: Path) -> None:
    embedded: list[str] = []
    pipeline, quality, redaction, _ = _pipeline(tmp_path, embedded)

    async def scenario() -> None:
        await pipeline.run(new_context(), inbound(body(f"Call me on {SECRET} please")))
        redaction.error = InvalidArgument("blocked by policy")
        with pytest.raises(InvalidArgument):
            await pipeline.run(new_context(request_id="r2"), inbound(body(f"{SECRET} again")))
        assert quality.prompts is not None
        await quality.prompts.drain()

    asyncio.run(scenario())

    # The refused request was never sampled: its text was not redacted.
    assert embedded == ["Call me on [PHONE_1] please"]
    assert all(SECRET not in text for text in embedded)


def test_only_the_upstreams_answers_count_for_drift(tmp_path: Path) -> None:
    pipeline, quality, _, cache = _pipeline(tmp_path, [])

    async def scenario() -> None:
        await pipeline.run(new_context(), inbound(body("hi")))
        cache.stored = {"candidates": [{"finishReason": "STOP"}]}
        await pipeline.run(new_context(request_id="r2"), inbound(body("hi")))

    asyncio.run(scenario())

    assert quality.drift is not None
    assert [r.recent_answers for r in quality.drift.reports()] == [1]
