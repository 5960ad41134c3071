"""Each worker's outcome of a reload, from every worker's configuration before the signal and
after it: applied, rejected, started again since, not running, and not reported in time."""

from __future__ import annotations

from typing import Any

from localgate.policy.host_reload import (
    APPLIED,
    NO_ANSWER,
    REJECTED,
    RESTARTED,
    STARTING,
    WorkerConfig,
    reload_outcomes,
)


def _config(
    worker: int, pid: int, reloads: int, last: dict[str, Any] | None = None
) -> WorkerConfig:
    return WorkerConfig(worker, pid, 1 + reloads, f"h{reloads}", reloads, last)


APPLIED_RESULT = {"applied": True, "problems": [], "restart_needed": ["server: changed"]}
REJECTED_RESULT = {"applied": False, "problems": ["server.port: must be >= 0"]}


def test_it_waits_until_every_worker_seen_before_has_reported() -> None:
    before = {0: _config(0, 10, 0), 1: _config(1, 11, 0)}
    halfway = {0: _config(0, 10, 1, APPLIED_RESULT), 1: _config(1, 11, 0)}
    assert reload_outcomes(before, halfway, 2, final=False) is None

    done = {**halfway, 1: _config(1, 11, 1, REJECTED_RESULT)}
    outcomes = reload_outcomes(before, done, 2, final=False)
    assert outcomes is not None
    assert [(o.worker, o.pid, o.outcome, o.version) for o in outcomes] == [
        (0, 10, APPLIED, 2),
        (1, 11, REJECTED, 2),
    ]
    assert outcomes[0].restart_needed == ("server: changed",)
    assert outcomes[1].problems == ("server.port: must be >= 0",)
    assert [o.failed for o in outcomes] == [False, True]


def test_a_worker_started_again_or_not_running_is_not_waited_for() -> None:
    before = {0: _config(0, 10, 0)}  # worker 1 was restarting and did not answer
    after = {0: _config(0, 20, 0)}  # worker 0 died and came back; worker 1 still starting
    outcomes = reload_outcomes(before, after, 2, final=False)
    assert outcomes is not None
    assert [(o.worker, o.pid, o.outcome, o.failed) for o in outcomes] == [
        (0, 20, RESTARTED, False),
        (1, None, STARTING, False),
    ]


def test_a_worker_that_does_not_report_in_time_is_no_answer() -> None:
    before = {0: _config(0, 10, 3), 1: _config(1, 11, 3)}
    after = {0: _config(0, 10, 4, APPLIED_RESULT)}  # worker 1 stopped answering
    assert reload_outcomes(before, after, 2, final=False) is None
    outcomes = reload_outcomes(before, after, 2, final=True)
    assert outcomes is not None
    assert [(o.worker, o.pid, o.outcome, o.hash, o.failed) for o in outcomes] == [
        (0, 10, APPLIED, "h4", False),
        (1, 11, NO_ANSWER, "h3", True),
    ]


def test_a_worker_config_travels_as_json() -> None:
    config = _config(1, 11, 2, REJECTED_RESULT)
    assert WorkerConfig.from_dict(config.as_dict()) == config
