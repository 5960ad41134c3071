"""3. Paraphrases and near-misses: which seed's entry, if any, answered each question."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cache.corpus import Question
from bench.cache.gateway import CACHE_HEADER, Gateway, Reply, gateway_config
from bench.cache.options import Options
from bench.cache.progress import progress
from bench.cache.prompts import Redactor, ask
from bench.servers import BenchError
from localgate.testing import FakeGemini

__all__ = ["Quality", "Served", "measure_quality"]

_PLACEHOLDER = re.compile(r"\[[A-Z][A-Z0-9_]*_[0-9]+\]")


@dataclass(frozen=True, slots=True)
class Served:
    """How the gateway answered one phase-2 question."""

    question: Question
    layer: str | None  # "exact", "semantic", or None for a miss
    source: str | None  # the group whose seed's entry answered; "?" if none matches
    foreign: bool  # the answer carried a value this request does not contain
    relation: str  # to its seed after redaction: "same request", "anchors differ", "embedder"

    @property
    def right(self) -> bool:
        """A paraphrase answered from its own seed's entry."""
        return self.question.role == "paraphrase" and self.source == self.question.group

    @property
    def wrong(self) -> bool:
        """A near-miss answered from the cache, or a question answered from another group."""
        if self.layer is None:
            return False
        return self.question.role == "near-miss" or self.source != self.question.group

    @property
    def avoidable(self) -> bool:
        """A wrong hit some threshold would have prevented (not the seed's very request)."""
        return self.wrong and self.relation != "same request"


@dataclass(frozen=True, slots=True)
class Quality:
    """One embedder and threshold over the whole corpus."""

    embedder: str
    threshold: float
    served: list[Served]
    seeds_redacted_apart: int  # seeds the gateway redacted differently from this script


def measure_quality(
    folder: Path,
    upstream: FakeGemini,
    groups: Sequence[Sequence[Question]],
    redactor: Redactor,
    embedder: str,
    threshold: float,
    options: Options,
) -> Quality:
    """Store every seed, then ask every paraphrase and near-miss once."""
    progress(f"quality: {embedder} at threshold {threshold:.2f}")
    upstream.reset()
    name = f"quality-{embedder.lower()}-{threshold:.2f}"
    with ExitStack() as stack:
        config = gateway_config(embedder, threshold, options)
        gateway = Gateway(folder / name, config, upstream.base_url).start(stack)
        patterns: dict[str, re.Pattern[str]] = {}
        apart = 0
        version = ""
        for group in groups:
            seed = group[0]
            # "refresh" skips the lookup and stores the answer: every seed gets its entry.
            reply = gateway.post(ask(seed.text), control="refresh")
            sent = str(upstream.requests[-1].body["contents"][-1]["parts"][-1]["text"])
            apart += sent != redactor.text(seed.text)
            if reply.cache != "refresh" or reply.text != f"echo: {seed.text}":
                raise BenchError(f"seed {seed.group} was answered oddly: {reply}")
            patterns[seed.group] = _answer_pattern(f"echo: {sent}")
            version = reply.version
        gateway.wait_stored(len(groups))
        upstream.fail_with(200, _not_kept(version))
        served = []
        for group in groups:
            for question in group[1:]:
                reply = gateway.post(ask(question.text))
                relation = redactor.relation(group[0].text, question.text)
                served.append(_classify(question, reply, patterns, relation))
    return Quality(embedder, threshold, served, apart)


def _not_kept(version: str) -> dict[str, Any]:
    """Phase 2's answer from the upstream: forwarded, but never stored (not a STOP).

    It says the same ``modelVersion`` as the seeds' answers: any other would tell the
    cache that the model changed, and every seed's entry would be stale.
    """
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": "(answered by the upstream)"}], "role": "model"},
                "finishReason": "MAX_TOKENS",
                "index": 0,
            }
        ],
        "modelVersion": version,
    }


def _answer_pattern(stored: str) -> re.Pattern[str]:
    """Matches the stored answer restored with any request's values; captures those values."""
    pieces = _PLACEHOLDER.split(stored)
    return re.compile("(.+?)".join(re.escape(piece) for piece in pieces), re.DOTALL)


def _classify(
    question: Question, reply: Reply, patterns: Mapping[str, re.Pattern[str]], relation: str
) -> Served:
    if reply.cache == "miss":
        return Served(question, None, None, False, relation)
    if not reply.cache.startswith("hit; layer="):
        raise BenchError(f"unexpected {CACHE_HEADER}: {reply.cache!r}")
    layer = reply.cache.removeprefix("hit; layer=")
    matches = {group: found for group, p in patterns.items() if (found := p.fullmatch(reply.text))}
    if not matches:
        return Served(question, layer, "?", False, relation)
    source = question.group if question.group in matches else next(iter(matches))
    values = matches[source].groups()
    foreign = any(value not in question.text for value in values)
    return Served(question, layer, source, foreign, relation)
