"""Tallies of answers, and the two windows drift compares: a reference fixed once full,
and a recent window that slides. Memory is O(bins): a tally is a few fixed-size counts,
and the recent window keeps one tally per slice."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from localgate.quality.answers import (
    FINISH_REASONS,
    LENGTH_EDGES,
    REFUSALS,
    AnswerFacts,
    finish_index,
)
from localgate.quality.answers import length_bin as _length_bin

__all__ = ["Reference", "SlidingWindow", "Tally"]


@dataclass(slots=True)
class Tally:
    """Counts over a set of answers: output lengths, finish reasons, refusals, and the sum
    of their average log-probabilities."""

    answers: int = 0
    refusals: int = 0
    lengths: list[int] = field(default_factory=lambda: [0] * (len(LENGTH_EDGES) + 1))
    finishes: list[int] = field(default_factory=lambda: [0] * len(FINISH_REASONS))
    logprob_sum: float = 0.0
    logprob_answers: int = 0

    def add(self, facts: AnswerFacts) -> None:
        """Count one answer."""
        outcome = facts.outcome
        self.answers += 1
        self.refusals += outcome in REFUSALS
        if facts.output_tokens is not None:
            self.lengths[_length_bin(facts.output_tokens)] += 1
        self.finishes[finish_index(outcome)] += 1
        average = facts.avg_logprob
        if average is not None:
            self.logprob_sum += average
            self.logprob_answers += 1

    def merge(self, other: Tally) -> None:
        """Add ``other``'s counts to these."""
        self.answers += other.answers
        self.refusals += other.refusals
        self.lengths = [a + b for a, b in zip(self.lengths, other.lengths, strict=True)]
        self.finishes = [a + b for a, b in zip(self.finishes, other.finishes, strict=True)]
        self.logprob_sum += other.logprob_sum
        self.logprob_answers += other.logprob_answers

    def to_json(self) -> dict[str, Any]:
        """The counts, for the saved state."""
        return {
            "answers": self.answers,
            "refusals": self.refusals,
            "lengths": self.lengths,
            "finishes": self.finishes,
            "logprob_sum": self.logprob_sum,
            "logprob_answers": self.logprob_answers,
        }

    @classmethod
    def from_json(cls, saved: Any) -> Tally:
        """Counts saved by ``to_json``; ``ValueError`` if they do not fit these bins."""
        if not isinstance(saved, dict):
            raise ValueError("a tally is an object")
        tally = cls(
            answers=_count(saved.get("answers")),
            refusals=_count(saved.get("refusals")),
            lengths=[_count(value) for value in saved.get("lengths") or ()],
            finishes=[_count(value) for value in saved.get("finishes") or ()],
            logprob_sum=float(saved.get("logprob_sum", 0.0)),
            logprob_answers=_count(saved.get("logprob_answers")),
        )
        if len(tally.lengths) != len(LENGTH_EDGES) + 1 or len(tally.finishes) != len(
            FINISH_REASONS
        ):
            raise ValueError("saved with other bins")
        return tally

    @property
    def refusal_ratio(self) -> float:
        """Share of the answers refused."""
        return self.refusals / self.answers if self.answers else 0.0

    @property
    def avg_logprob(self) -> float | None:
        """Mean average log-probability of the answers that had one."""
        return self.logprob_sum / self.logprob_answers if self.logprob_answers else None


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value


class SlidingWindow:
    """The answers of the last ``window_s`` seconds, in ``slices`` tallies: a slice is
    dropped whole once it is older than the window, so the window moves on by
    ``window_s / slices`` at a time."""

    def __init__(self, window_s: float, slices: int) -> None:
        self._slice_s = window_s / slices
        self._slices_kept = slices
        self._slices: deque[tuple[int, Tally]] = deque()

    def add(self, facts: AnswerFacts, now: float) -> None:
        """Count one answer that came at ``now``."""
        self._tally_at(now).add(facts)

    def _tally_at(self, now: float) -> Tally:
        number = int(now // self._slice_s)
        if not self._slices or self._slices[-1][0] != number:
            self._slices.append((number, Tally()))
            self._expire(number)
        return self._slices[-1][1]

    def total(self, now: float) -> Tally:
        """Every answer in the window ending at ``now``."""
        self._expire(int(now // self._slice_s))
        total = Tally()
        for _, tally in list(self._slices):
            total.merge(tally)
        return total

    def _expire(self, number: int) -> None:
        while self._slices and self._slices[0][0] <= number - self._slices_kept:
            self._slices.popleft()


class Reference:
    """The reference window: answers from the first on, fixed once it holds ``size``
    answers, or once ``period_s`` seconds have passed since its first answer and it holds
    at least ``min_answers``."""

    def __init__(self, size: int, period_s: float | None, min_answers: int) -> None:
        self.tally = Tally()
        self.fixed = False
        self._size = size
        self._period_s = period_s
        self._min_answers = min_answers
        self._started: float | None = None

    @classmethod
    def fixed_at(cls, tally: Tally) -> Reference:
        """A reference fixed with ``tally`` (restored from the saved state)."""
        reference = cls(tally.answers, None, tally.answers)
        reference.tally, reference.fixed = tally, True
        return reference

    def add(self, facts: AnswerFacts, now: float) -> None:
        """Count ``facts`` unless the reference is fixed already."""
        if self.settle(now):
            return
        if self._started is None:
            self._started = now
        self.tally.add(facts)
        self.settle(now)

    def settle(self, now: float) -> bool:
        """Fix the reference if it is complete at ``now``; whether it is fixed."""
        if not self.fixed:
            tally = self.tally
            full = tally.answers >= self._size
            aged = (
                self._period_s is not None
                and self._started is not None
                and now - self._started >= self._period_s
                and tally.answers >= self._min_answers
            )
            self.fixed = full or aged
        return self.fixed
