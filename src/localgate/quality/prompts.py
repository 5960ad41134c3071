"""Prompt drift per tenant: how similar a tenant's recent prompts are to its reference
prompts, as embeddings of the REDACTED last turn by the local embedder.

Off unless configured, and bounded: only the configured tenants, a sampled share of
their requests, a bounded queue (a full one skips the sample), embedded in batches in a
worker thread off the event loop. Memory is one vector per tenant (the reference's sum
of unit vectors) and a few numbers per slice of the recent window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from localgate.config import PromptDriftSettings
from localgate.observability.quality import Reading
from localgate.vectorstore.embedders import Embedder

__all__ = ["PromptDrift", "PromptReport"]

logger = logging.getLogger("localgate.quality")
_BATCH = 32


@dataclass(slots=True)
class _Tenant:
    reference_sum: npt.NDArray[np.float64] | None = None
    reference_prompts: int = 0
    fixed: bool = False
    # (slice number, sum of similarities, prompts), oldest first
    recent: deque[list[float]] = field(default_factory=deque)


@dataclass(frozen=True, slots=True)
class PromptReport:
    """One tenant's prompt picture."""

    tenant: str
    reference_prompts: int
    reference_fixed: bool
    recent_prompts: int
    reference_similarity: float | None
    recent_similarity: float | None


class PromptDrift:
    """Samples tenants' redacted prompts, embeds them, and compares recent with reference."""

    def __init__(
        self,
        settings: PromptDriftSettings,
        *,
        window_s: float,
        slices: int,
        embedder: Callable[[], Embedder],
        clock: Callable[[], float],
        random: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._tenants = frozenset(settings.tenants)
        self._slice_s = window_s / slices
        self._slices = slices
        self._make_embedder = embedder
        self._embedder: Embedder | None = None
        self._clock = clock
        self._random = random
        self._state = {tenant: _Tenant() for tenant in settings.tenants}
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue(settings.max_pending)
        self._task: asyncio.Task[None] | None = None

    def offer(self, tenant: str, text: str) -> bool:
        """Sample ``tenant``'s redacted prompt ``text`` (on the request's path: a set lookup,
        a random number and a queue put); whether it was taken."""
        if tenant not in self._tenants or not text or self._random() >= self._settings.sample_rate:
            return False
        try:
            self._queue.put_nowait((tenant, text))
        except asyncio.QueueFull:
            return False
        return True

    async def start(self) -> None:
        """Begin embedding sampled prompts."""
        self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        """Stop embedding (samples still queued are dropped)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def drain(self) -> None:
        """Embed and count every prompt queued now (tests; the worker does it as they come)."""
        while not self._queue.empty():
            await self._embed_batch([])

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            try:
                await self._embed_batch([first])
            except Exception:
                logger.exception("quality: embedding sampled prompts failed")

    async def _embed_batch(self, batch: list[tuple[str, str]]) -> None:
        while not self._queue.empty() and len(batch) < _BATCH:
            batch.append(self._queue.get_nowait())
        if batch:
            vectors = await asyncio.to_thread(self._embed, [text for _, text in batch])
            for (tenant, _), vector in zip(batch, vectors, strict=True):
                self.add(tenant, vector)

    def _embed(self, texts: list[str]) -> npt.NDArray[np.float64]:
        if self._embedder is None:  # built in the worker thread: slow imports stay off the loop
            self._embedder = self._make_embedder()
        return np.asarray(self._embedder.embed(texts), dtype=np.float64)

    def add(self, tenant: str, vector: npt.NDArray[np.float64]) -> None:
        """Count one embedded prompt (a unit vector; all zeros for an empty text)."""
        state = self._state.get(tenant)
        if state is None or not np.any(vector):
            return
        if not state.fixed:
            if state.reference_sum is None:
                state.reference_sum = np.zeros(vector.shape, dtype=np.float64)
            state.reference_sum += vector
            state.reference_prompts += 1
            state.fixed = state.reference_prompts >= self._settings.reference_prompts
            return
        centroid = _unit(state.reference_sum)
        if centroid is None:
            return
        number = int(self._clock() // self._slice_s)
        if not state.recent or state.recent[-1][0] != number:
            state.recent.append([number, 0.0, 0])
        state.recent[-1][1] += float(vector @ centroid)
        state.recent[-1][2] += 1
        self._expire(state, number)

    def _expire(self, state: _Tenant, number: int) -> None:
        while state.recent and state.recent[0][0] <= number - self._slices:
            state.recent.popleft()

    def reports(self) -> list[PromptReport]:
        """Each watched tenant's reference and recent similarity, now."""
        number = int(self._clock() // self._slice_s)
        found = []
        for tenant, state in self._state.items():
            self._expire(state, number)
            recent = list(state.recent)
            prompts = int(sum(entry[2] for entry in recent))
            similarities = math.fsum(entry[1] for entry in recent)
            reference = None
            if state.reference_sum is not None and state.reference_prompts:
                # The mean similarity of unit vectors to their centroid is |sum| / n.
                reference = float(np.linalg.norm(state.reference_sum)) / state.reference_prompts
            found.append(
                PromptReport(
                    tenant=tenant,
                    reference_prompts=state.reference_prompts,
                    reference_fixed=state.fixed,
                    recent_prompts=prompts,
                    reference_similarity=reference if state.fixed else None,
                    recent_similarity=similarities / prompts if prompts else None,
                )
            )
        return found

    def readings(self) -> list[Reading]:
        """The prompt gauges' samples."""
        samples: list[Reading] = []
        for report in self.reports():
            tenant = report.tenant
            samples.append(
                (
                    "localgate_quality_prompt_samples",
                    (tenant, "reference"),
                    report.reference_prompts,
                )
            )
            samples.append(
                ("localgate_quality_prompt_samples", (tenant, "recent"), report.recent_prompts)
            )
            if report.reference_similarity is not None:
                samples.append(
                    (
                        "localgate_quality_prompt_similarity",
                        (tenant, "reference"),
                        report.reference_similarity,
                    )
                )
            if report.recent_similarity is not None:
                samples.append(
                    (
                        "localgate_quality_prompt_similarity",
                        (tenant, "recent"),
                        report.recent_similarity,
                    )
                )
        return samples


def _unit(vector: npt.NDArray[np.float64] | None) -> npt.NDArray[np.float64] | None:
    if vector is None:
        return None
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else None
