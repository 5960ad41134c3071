"""How far apart two distributions are: the Jensen-Shannon divergence.

Jensen-Shannon rather than Kullback-Leibler: KL(recent || reference) is infinite as soon
as the recent window has a value the reference never had (a finish reason the model did
not use to give, a longer answer than any before) - exactly the shift worth seeing - so
KL needs smoothing, and then the smoothing constant, not the data, sets how large the
number gets. JS compares each side with their mixture, which is never zero where either
side is not: it is finite without smoothing, symmetric, bounded (0 to 1 in bits, so one
alert threshold fits every signal), and 0 exactly when the two are the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["js_divergence"]


def js_divergence(p: Sequence[float], q: Sequence[float]) -> float:
    """The Jensen-Shannon divergence in bits (0..1) between two histograms of the same
    bins (counts; each is normalised). 0.0 when either is empty."""
    if len(p) != len(q):
        raise ValueError("the histograms need the same bins")
    total_p, total_q = math.fsum(p), math.fsum(q)
    if total_p <= 0 or total_q <= 0:
        return 0.0
    divergence = 0.0
    for count_p, count_q in zip(p, q, strict=True):
        a, b = count_p / total_p, count_q / total_q
        m = (a + b) / 2
        if a > 0:
            divergence += a * math.log2(a / m)
        if b > 0:
            divergence += b * math.log2(b / m)
    # Rounding can leave a hair outside [0, 1].
    return min(1.0, max(0.0, divergence / 2))
