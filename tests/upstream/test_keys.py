"""An upstream's key pool: round-robin, and throttled keys sit out."""

from __future__ import annotations

from localgate.secret import Secret
from localgate.upstream.keys import KeyPool


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def revealed(pool: KeyPool) -> str | None:
    taken = pool.take()
    return None if taken is None else taken[1].reveal()


def test_keys_are_used_in_turn() -> None:
    pool = KeyPool([Secret("a"), Secret("b"), Secret("c")], clock=Clock())

    assert [revealed(pool) for _ in range(4)] == ["a", "b", "c", "a"]


def test_a_throttled_key_sits_out_its_cooldown() -> None:
    clock = Clock()
    pool = KeyPool([Secret("a"), Secret("b")], default_cooldown_s=60, clock=clock)
    pool.cool_down(0, 5.0)

    assert [revealed(pool) for _ in range(3)] == ["b", "b", "b"]
    clock.now = 5.0
    assert {revealed(pool), revealed(pool)} == {"a", "b"}


def test_with_every_key_cooling_the_one_ready_soonest_is_used_and_the_wait_is_known() -> None:
    clock = Clock()
    pool = KeyPool([Secret("a"), Secret("b")], default_cooldown_s=60, clock=clock)
    pool.cool_down(0, None)
    pool.cool_down(1, 7.0)

    assert revealed(pool) == "b"
    assert pool.wait_s() == 7.0


def test_an_empty_pool_has_no_key() -> None:
    assert KeyPool([]).take() is None
