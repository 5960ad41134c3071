"""The shipped alert rules (deploy/prometheus/alerts.yml): valid, tested, and about metrics
the gateway really exports."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from localgate.observability import GatewayMetrics

RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"
# promtool comes with Debian's prometheus package; `make test` installs it.
PROMTOOL = shutil.which("promtool")


def _promtool(*arguments: str) -> subprocess.CompletedProcess[str]:
    if PROMTOOL is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing: `make test` installs it (Debian: prometheus)")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return subprocess.run(  # noqa: S603 - promtool with fixed arguments
        [PROMTOOL, *arguments], cwd=RULES, capture_output=True, text=True, check=False
    )


def test_the_rules_are_valid_prometheus_rules() -> None:
    result = _promtool("check", "rules", "alerts.yml")

    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alerts_fire_and_stay_quiet_as_their_unit_tests_say() -> None:
    result = _promtool("test", "rules", "alerts.test.yml")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_metric_the_rules_read_is_one_the_gateway_exports() -> None:
    exported = {
        sample.name for family in GatewayMetrics().registry.collect() for sample in family.samples
    } | {
        f"{family.name}{suffix}"
        for family in GatewayMetrics().registry.collect()
        for suffix in _SUFFIXES.get(family.type, ("",))
    }
    read = set(re.findall(r"\blocalgate_[a-z_]+", (RULES / "alerts.yml").read_text()))

    assert read, "no metric found in the rules"
    assert sorted(read - exported) == []


# The series a metric family is exposed as, beyond its own name.
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "gauge": ("",),
}
