"""Fixed drift references outlive a restart; anything else in the saved file is refused."""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

import orjson
import pytest

from localgate.config import QualitySettings
from localgate.quality import QualityStage
from tests.quality.test_drift import ALERT_THRESHOLD, Clock, feed, settings, shifted, usual


def stage_at(path: Path, clock: Clock, **changes: object) -> QualityStage:
    return QualityStage(QualitySettings(drift=settings(**changes)), clock=clock, state_path=path)


def test_a_restarted_gateway_compares_with_the_reference_it_had(tmp_path: Path) -> None:
    rng, clock, path = random.Random(21), Clock(), tmp_path / "quality-drift.json"
    before = stage_at(path, clock)
    assert before.drift is not None
    feed(before.drift, clock, [usual(rng) for _ in range(600)], every_s=1.0)
    feed(before.drift, clock, [usual(rng, "v2") for _ in range(50)], every_s=1.0)  # not fixed
    before.save()

    restarted = Clock()
    after = stage_at(path, restarted)
    assert after.load() == 1
    assert after.drift is not None
    (report,) = after.drift.reports()
    assert (report.model_version, report.reference_answers) == ("gemini-2.5-flash-001", 500)
    assert report.reference_fixed
    assert report.recent_answers == 0  # the recent window starts again
    feed(after.drift, restarted, [shifted(rng) for _ in range(200)], every_s=1.0)

    (report,) = after.drift.reports()
    assert report.reference_answers == 500  # fixed: the new answers did not go in
    assert report.drift["reference"]["output_length"] > ALERT_THRESHOLD


def test_the_previous_versions_reference_is_kept_with_the_new_one(tmp_path: Path) -> None:
    rng, clock, path = random.Random(22), Clock(), tmp_path / "state.json"
    before = stage_at(path, clock)
    assert before.drift is not None
    feed(before.drift, clock, [usual(rng, "v1") for _ in range(600)], every_s=1.0)
    feed(before.drift, clock, [usual(rng, "v2") for _ in range(600)], every_s=1.0)
    before.save()

    after = stage_at(path, clock)
    after.load()
    assert after.drift is not None
    feed(after.drift, clock, [usual(rng, "v2") for _ in range(150)], every_s=1.0)

    reports = {r.model_version: r for r in after.drift.reports()}
    assert reports["v2"].previous_version == "v1"
    assert "previous_version" in reports["v2"].drift


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[]",
        orjson.dumps({"format": 99, "series": []}),
        orjson.dumps({"format": 1, "series": [{"model": "m", "model_version": "v"}]}),
        orjson.dumps(
            {
                "format": 1,
                "series": [
                    {
                        "model": "m",
                        "model_version": "v",
                        "reference": {"answers": 5, "refusals": 0, "lengths": [5], "finishes": []},
                    }
                ],
            }
        ),
        orjson.dumps(
            {
                "format": 1,
                "series": [
                    {
                        "model": "m",
                        "model_version": "v",
                        "reference": {"answers": -1, "lengths": [0] * 12, "finishes": [0] * 15},
                    }
                ],
            }
        ),
    ],
)
def test_a_damaged_or_foreign_file_is_set_aside_with_a_warning(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "quality-drift.json"
    path.write_bytes(content)
    stage = stage_at(path, Clock())

    with caplog.at_level(logging.WARNING, logger="localgate.quality"):
        assert stage.load() == 0

    assert stage.drift is not None
    assert stage.drift.reports() == []
    assert "starting afresh" in caplog.text


def test_nothing_is_saved_or_read_when_persistence_is_off(tmp_path: Path) -> None:
    path = tmp_path / "quality-drift.json"
    stage = stage_at(path, Clock(), persist=False)

    async def run() -> None:
        await stage.start()
        await stage.close()

    asyncio.run(run())

    assert not path.exists()


def test_close_saves_and_start_takes_up(tmp_path: Path) -> None:
    rng, clock, path = random.Random(23), Clock(), tmp_path / "data" / "quality-drift.json"
    first = stage_at(path, clock)
    assert first.drift is not None

    async def run(stage: QualityStage, answers: int) -> None:
        await stage.start()
        if stage.drift is not None:
            feed(stage.drift, clock, [usual(rng) for _ in range(answers)], every_s=1.0)
        await stage.close()

    asyncio.run(run(first, 600))
    second = stage_at(path, clock)
    asyncio.run(run(second, 0))

    assert second.drift is not None
    assert [r.reference_answers for r in second.drift.reports()] == [500]
    assert not path.with_name("quality-drift.json.partial").exists()
