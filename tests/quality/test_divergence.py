"""The Jensen-Shannon divergence: 0 for the same distribution, growing with a shift."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localgate.quality import js_divergence

_histogram = st.lists(st.integers(min_value=0, max_value=10_000), min_size=2, max_size=16).filter(
    lambda counts: sum(counts) > 0
)


@given(_histogram, st.integers(min_value=1, max_value=50))
def test_a_distribution_does_not_diverge_from_itself_at_any_scale(
    counts: list[int], scale: int
) -> None:
    assert js_divergence(counts, [count * scale for count in counts]) == pytest.approx(0, abs=1e-9)


@given(
    st.integers(min_value=2, max_value=16).flatmap(
        lambda size: st.tuples(
            st.lists(st.integers(0, 1000), min_size=size, max_size=size).filter(sum),
            st.lists(st.integers(0, 1000), min_size=size, max_size=size).filter(sum),
        )
    ),
    st.floats(min_value=0, max_value=1),
    st.floats(min_value=0, max_value=1),
)
def test_the_divergence_grows_as_the_distribution_moves_away(
    pair: tuple[list[int], list[int]], first: float, second: float
) -> None:
    # Mixing ever more of q into p: JS is convex in its second argument and 0 at p, so it
    # never shrinks along the way; and it is symmetric and within [0, 1] bits.
    p, q = pair
    p_norm = [count / sum(p) for count in p]
    q_norm = [count / sum(q) for count in q]
    near, far = sorted((first, second))

    def mix(t: float) -> list[float]:
        return [(1 - t) * a + t * b for a, b in zip(p_norm, q_norm, strict=True)]

    assert js_divergence(p_norm, mix(near)) <= js_divergence(p_norm, mix(far)) + 1e-9
    assert js_divergence(p, q) == pytest.approx(js_divergence(q, p), abs=1e-12)
    assert 0 <= js_divergence(p, q) <= 1


def test_disjoint_distributions_are_one_bit_apart() -> None:
    assert js_divergence([5, 0], [0, 7]) == pytest.approx(1.0)


def test_a_value_the_reference_never_had_gives_a_finite_divergence() -> None:
    # KL would be infinite here; JS is not, and needs no smoothing.
    value = js_divergence([100, 0], [90, 10])

    assert math.isfinite(value)
    assert 0 < value < 0.1


def test_empty_histograms_show_no_divergence_and_bins_must_match() -> None:
    assert js_divergence([0, 0], [1, 2]) == 0.0
    with pytest.raises(ValueError, match="same bins"):
        js_divergence([1, 2], [1, 2, 3])
