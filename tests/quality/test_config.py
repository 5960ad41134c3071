"""The quality settings: what is refused, and what `localgate check` says of a retry."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from localgate.cli import main
from localgate.config import load_settings
from localgate.errors import ConfigError


def problems(tmp_path: Path, text: str) -> str:
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(config, {})
    return str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("quality: {min_avg_logprob: 0.5}", "quality.min_avg_logprob"),
        ("routes: [{models: '*', min_avg_logprob: 1}]", "routes.0.min_avg_logprob"),
        ("routes: [{models: '*', retry_low_confidence_on: 'a b'}]", "retry_low_confidence_on"),
        ("quality: {drift: {min_answers: 10, reference_answers: 5}}", "min_answers"),
        ("quality: {drift: {prompts: {enabled: true}}}", "name the tenants to watch"),
        ("quality: {drift: {windows: 3}}", "quality.drift.windows"),
    ],
)
def test_bad_quality_settings_are_refused_with_their_path(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert expected in problems(tmp_path, text + "\n")


def test_check_counts_the_retry_on_a_stronger_model_among_the_attempts(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "retries: {max_attempts: 3, attempts_per_upstream: 2}\n"
        "quality: {min_avg_logprob: -1.5}\n"
        "routes:\n"
        "  - {models: gemini-2.5-flash, retry_low_confidence_on: gemini-2.5-pro}\n"
    )

    result = CliRunner().invoke(main, ["check", "--config", str(config)])

    assert result.exit_code == 0, result.output
    assert (
        "  low confidence (below avg logprob -1.5): asked again of gemini-2.5-pro; at most 3 "
        "attempt(s) in all" in result.output
    )
    assert "a request makes at most 3 upstream attempt(s)" in result.output


def test_thresholds_reload_and_the_drift_windows_wait_for_a_restart() -> None:
    from localgate.config import Settings
    from localgate.policy import PolicySnapshot
    from localgate.policy.reload import restart_needed_for

    running = Settings()
    changed = Settings.model_validate(
        {"quality": {"min_avg_logprob": -0.7, "drift": {"recent_window_s": 60}}}
    )

    assert restart_needed_for(running, changed) == [
        "quality.drift.recent_window_s: changed; takes effect after a restart"
    ]
    rule = PolicySnapshot.build(changed).default.routing.confidence
    assert rule is not None
    assert rule.min_avg_logprob == -0.7
