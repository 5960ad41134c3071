"""What one answer says about the model's behaviour: its length, how it finished, whether
it was refused, and how sure the model was (its log-probabilities).

Read from a whole answer or accumulated over a stream's events, field by field as Gemini
writes them (``candidates[].finishReason``, ``candidates[].avgLogprobs``,
``candidates[].logprobsResult.chosenCandidates[].logProbability``,
``usageMetadata.candidatesTokenCount``, ``promptFeedback.blockReason``, ``modelVersion``).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, TypeGuard

__all__ = [
    "FINISH_REASONS",
    "LENGTH_EDGES",
    "REFUSALS",
    "AnswerFacts",
    "length_bin",
]

# Output tokens: bin i holds lengths from LENGTH_EDGES[i-1] (0 for the first) up to
# LENGTH_EDGES[i]; the last bin is everything from 8192 on.
LENGTH_EDGES = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
# Gemini's finish reasons, plus PROMPT_BLOCKED (no candidate: promptFeedback.blockReason)
# and NONE (no finish reason given); an unknown one counts as OTHER.
FINISH_REASONS = (
    "STOP",
    "MAX_TOKENS",
    "SAFETY",
    "RECITATION",
    "LANGUAGE",
    "OTHER",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "MALFORMED_FUNCTION_CALL",
    "IMAGE_SAFETY",
    "UNEXPECTED_TOOL_CALL",
    "TOO_MANY_TOOL_CALLS",
    "PROMPT_BLOCKED",
    "NONE",
)
_FINISH_INDEX = {reason: index for index, reason in enumerate(FINISH_REASONS)}
# Answers the model (or Google's filters) refused or blocked.
REFUSALS = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
     "PROMPT_BLOCKED"}
)  # fmt: skip


def length_bin(tokens: int) -> int:
    """The output-length bin of an answer of ``tokens`` tokens."""
    return bisect_right(LENGTH_EDGES, tokens)


def finish_index(reason: str) -> int:
    """The finish-reason bin of ``reason``."""
    return _FINISH_INDEX.get(reason, _FINISH_INDEX["OTHER"])


@dataclass(slots=True)
class _Logprobs:
    token_sum: float = 0.0
    tokens: int = 0
    average_sum: float = 0.0
    averages: int = 0

    def mean(self) -> float | None:
        # Token log-probabilities when the answer has them (exact), else the mean of the
        # avgLogprobs values its events carried.
        if self.tokens:
            return self.token_sum / self.tokens
        if self.averages:
            return self.average_sum / self.averages
        return None


@dataclass(slots=True)
class AnswerFacts:
    """An answer's behaviour, accumulated over its events (a unary answer is one)."""

    model_version: str | None = None
    finish_reason: str | None = None
    prompt_blocked: bool = False
    output_tokens: int | None = None
    total_tokens: int | None = None
    _logprobs: dict[int, _Logprobs] = field(default_factory=dict)

    def add(self, answer: Any) -> None:
        """Note what one answer or stream event says (the last value of each field wins;
        log-probabilities add up)."""
        if not isinstance(answer, dict):
            return
        version = answer.get("modelVersion")
        if isinstance(version, str):
            self.model_version = version
        usage = answer.get("usageMetadata")
        if isinstance(usage, dict):
            count = usage.get("candidatesTokenCount")
            if isinstance(count, int) and count >= 0:
                self.output_tokens = count
            total = usage.get("totalTokenCount")
            if isinstance(total, int) and total >= 0:
                self.total_tokens = total
        feedback = answer.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            self.prompt_blocked = True
        candidates = answer.get("candidates")
        if not isinstance(candidates, list):
            return
        for position, candidate in enumerate(candidates):
            if isinstance(candidate, dict):
                self._candidate(position, candidate)

    def _candidate(self, position: int, candidate: dict[str, Any]) -> None:
        reason = candidate.get("finishReason")
        average = candidate.get("avgLogprobs")
        result = candidate.get("logprobsResult")
        if reason is None and average is None and result is None:
            return  # most stream events: text only, nothing to note
        index = candidate.get("index", position)
        if not isinstance(index, int):
            index = position
        if index == 0 and isinstance(reason, str):
            self.finish_reason = reason
        chosen = result.get("chosenCandidates") if isinstance(result, dict) else None
        if not _number(average) and not isinstance(chosen, list):
            return
        logprobs = self._logprobs.get(index)
        if logprobs is None:
            logprobs = self._logprobs[index] = _Logprobs()
        if _number(average):
            logprobs.average_sum += average
            logprobs.averages += 1
        if isinstance(chosen, list):
            for token in chosen:
                value = token.get("logProbability") if isinstance(token, dict) else None
                if _number(value):
                    logprobs.token_sum += value
                    logprobs.tokens += 1

    @property
    def avg_logprob(self) -> float | None:
        """The average log-probability per token: the lowest of the candidates' (None if
        the answer carried none)."""
        logprobs = self._logprobs
        if not logprobs:
            return None
        if len(logprobs) == 1:
            for only in logprobs.values():
                return only.mean()
        means = [mean for entry in logprobs.values() if (mean := entry.mean()) is not None]
        return min(means) if means else None

    @property
    def outcome(self) -> str:
        """The answer's finish-reason bin name."""
        if self.finish_reason is None:
            return "PROMPT_BLOCKED" if self.prompt_blocked else "NONE"
        return FINISH_REASONS[finish_index(self.finish_reason)]

    @property
    def refused(self) -> bool:
        """Whether the answer was refused or blocked for safety."""
        return self.outcome in REFUSALS


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
