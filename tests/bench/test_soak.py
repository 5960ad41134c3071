"""The soak benchmark's judgement of resident memory, and the requests it sends."""

from __future__ import annotations

import json

import pytest
from bench.memory import MemorySample, judge
from bench.soak import PATHS, TEMPLATES, soak_script


def samples(*totals_mib: float, step: int = 50_000) -> list[MemorySample]:
    """One sample every ``step`` requests, starting before the first request."""
    return [
        MemorySample(
            requests=index * step,
            elapsed_s=index * 10.0,
            rss_kib=round(total * 1024),
            children_kib=0,
        )
        for index, total in enumerate(totals_mib)
    ]


def test_growth_during_the_warmup_does_not_count() -> None:
    taken = samples(110, 160, 165, 166, 165, 167, 166)

    verdict = judge(taken, warmup_requests=100_000)

    assert verdict.baseline.requests == 100_000
    assert verdict.end.requests == 300_000
    assert verdict.end_growth == pytest.approx(166 / 165 - 1)
    assert verdict.peak_growth == pytest.approx(167 / 165 - 1)
    assert verdict.flat


def test_a_steady_climb_is_not_flat_and_its_trend_is_measured() -> None:
    # 5 MiB more every 50,000 requests after the warm-up: 10 MiB per 100,000.
    taken = samples(110, 150, 155, 160, 165, 170, 175)

    verdict = judge(taken, warmup_requests=50_000)

    assert verdict.peak_growth == pytest.approx(175 / 150 - 1)
    assert not verdict.flat
    assert verdict.slope_kib_per_100k == pytest.approx(10 * 1024)
    assert verdict.late_slope_kib_per_100k == pytest.approx(10 * 1024)


def test_memory_that_settles_climbs_less_in_the_later_half() -> None:
    verdict = judge(samples(100, 150, 156, 160, 162, 163, 163.5), warmup_requests=50_000)

    assert verdict.flat
    assert 0 < verdict.late_slope_kib_per_100k < verdict.slope_kib_per_100k / 2


def test_the_limit_is_ten_percent_above_the_warmup_end() -> None:
    assert judge(samples(100, 100, 110), warmup_requests=50_000).flat
    assert not judge(samples(100, 100, 110.2), warmup_requests=50_000).flat


def test_shrinking_is_flat_and_the_trend_goes_down() -> None:
    verdict = judge(samples(100, 150, 140, 130), warmup_requests=50_000)

    assert verdict.flat
    assert verdict.end_growth < 0
    assert verdict.slope_kib_per_100k < 0


def test_the_childrens_memory_counts() -> None:
    quiet = samples(100, 100, 100)
    # The gateway stays put while a child (the vector store's) doubles.
    grown = [*quiet[:2], MemorySample(100_000, 20.0, quiet[2].rss_kib, 100 * 1024)]

    assert not judge(grown, warmup_requests=50_000).flat


def test_one_sample_after_the_warmup_is_not_enough_to_call_it_flat() -> None:
    verdict = judge(samples(100, 100), warmup_requests=50_000)

    assert verdict.samples_after_warmup == 1
    assert not verdict.flat


def test_a_run_that_never_left_the_warmup_cannot_be_judged() -> None:
    with pytest.raises(ValueError, match="no sample after the warm-up of 500,000 requests"):
        judge(samples(100, 120, 130), warmup_requests=500_000)


def test_every_request_template_is_a_generate_content_body_with_its_number() -> None:
    for template in TEMPLATES:
        body = json.loads(template.replace("{n}", "12345678"))
        assert "12345678" in json.dumps(body["contents"], ensure_ascii=False)
    mobile = json.loads(TEMPLATES[0].replace("{n}", "12345678"))
    assert "13812345678" in mobile["contents"][0]["parts"][0]["text"]


def test_the_script_counts_on_from_where_the_last_batch_stopped() -> None:
    script = soak_script({"x-goog-api-key": "k"}, first=123_456)

    assert "local counter = 123456\n" in script
    assert all(path in script for path in PATHS)
    assert "BENCH_RESULT" in script  # wrk's result line, which the batch reads
