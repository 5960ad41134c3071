"""The reloader: validate as ``localgate check`` does, swap whole, keep the last good one."""

from __future__ import annotations

import asyncio
from pathlib import Path

from localgate.config import load_settings
from localgate.observability import GatewayMetrics
from localgate.policy import ConfigReloader, PolicySnapshot

GOOD = "tenants:\n  acme:\n    redaction: {default_action: mask}\n"


def reloader_for(tmp_path: Path, text: str) -> tuple[ConfigReloader, Path, GatewayMetrics]:
    path = tmp_path / "localgate.yaml"
    path.write_text(text)
    environ = {"LOCALGATE_DATA_DIR": str(tmp_path / "data")}
    settings, _ = load_settings(path, environ)
    metrics = GatewayMetrics()
    snapshot = PolicySnapshot.build(settings, source=str(path))
    clock = iter(range(1000, 2000))
    reloader = ConfigReloader(snapshot, path, metrics, environ=environ, clock=lambda: next(clock))
    return reloader, path, metrics


def metric(metrics: GatewayMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_an_applied_reload_swaps_the_whole_snapshot_and_counts(tmp_path: Path) -> None:
    reloader, path, metrics = reloader_for(tmp_path, GOOD)
    before = reloader.current
    held_by_a_request = before.for_tenant("acme")
    path.write_text(GOOD.replace("mask", "block"))

    result = asyncio.run(reloader.reload())

    assert result.applied
    assert result.version == 2
    assert not result.problems
    assert reloader.current is not before
    assert reloader.current.for_tenant("acme").redaction.default_action == "block"
    assert held_by_a_request.redaction.default_action == "mask"  # in flight: unchanged
    assert metric(metrics, "localgate_config_reloads_total", result="applied") == 1
    assert metric(metrics, "localgate_config_last_reload_successful") == 1
    assert metric(metrics, "localgate_config_info", hash=result.hash, version="2") == 1
    assert metric(metrics, "localgate_config_info", hash=before.hash, version="1") is None


def test_a_rejected_reload_keeps_the_last_good_configuration_and_names_every_problem(
    tmp_path: Path,
) -> None:
    reloader, path, metrics = reloader_for(tmp_path, GOOD)
    before = reloader.current
    path.write_text(
        "tenants:\n  acme:\n    redaction: {default_action: erase}\n"
        "cache:\n  ttl_s: -1\n"
        "proxy:\n  redaction_rules:\n    - pattern: '(a)\\1'\n"
    )

    result = asyncio.run(reloader.reload())

    assert not result.applied
    assert reloader.current is before
    assert result.version == 1
    assert result.hash == before.hash
    problems = "\n".join(result.problems)
    assert "tenants.acme.redaction.default_action" in problems
    assert "cache.ttl_s: must be > 0" in problems
    assert "proxy.redaction_rules.0.pattern: not a valid RE2 pattern" in problems
    assert metric(metrics, "localgate_config_reloads_total", result="rejected") == 1
    assert metric(metrics, "localgate_config_last_reload_successful") == 0
    assert reloader.last == result
    assert reloader.attempts == 1


def test_a_file_that_is_gone_or_not_yaml_is_rejected(tmp_path: Path) -> None:
    reloader, path, _ = reloader_for(tmp_path, GOOD)
    path.write_text("tenants: [unclosed\n")
    not_yaml = asyncio.run(reloader.reload())
    path.unlink()
    gone = asyncio.run(reloader.reload())

    assert not not_yaml.applied
    assert "not valid YAML at line" in not_yaml.problems[0]
    assert not gone.applied
    assert "cannot read the file" in gone.problems[0]
    assert reloader.current.version == 1


def test_restart_only_settings_are_named_and_keep_running_until_a_restart(tmp_path: Path) -> None:
    reloader, path, _ = reloader_for(tmp_path, GOOD)
    path.write_text(GOOD + "server:\n  port: 9999\naudit:\n  key_period: month\n")

    first = asyncio.run(reloader.reload())
    second = asyncio.run(reloader.reload())  # still pending: named again

    for result in (first, second):
        assert result.applied
        assert result.restart_needed == (
            "audit.key_period: changed; takes effect after a restart",
            "server.port: changed; takes effect after a restart",
        )


def test_a_failing_preparation_rejects_the_reload(tmp_path: Path) -> None:
    reloader, path, _ = reloader_for(tmp_path, GOOD)
    prepared: list[int] = []

    def prepare(snapshot: PolicySnapshot) -> None:
        prepared.append(snapshot.version)
        if snapshot.version > 1:
            raise ValueError("proxy.redaction_rules: cannot be built")

    reloader.prepare_with(prepare)
    path.write_text(GOOD.replace("mask", "block"))

    result = asyncio.run(reloader.reload())

    assert prepared == [1, 2]  # the running snapshot at once, then the new one
    assert not result.applied
    assert result.problems == ("proxy.redaction_rules: cannot be built",)
    assert reloader.current.version == 1


def test_routes_aliases_and_residency_reload_but_upstreams_wait_for_a_restart(
    tmp_path: Path,
) -> None:
    upstreams = "upstreams:\n  eu: {base_url: 'http://eu.example'}\n"
    before = upstreams + "routes: [{models: gemini-flash, model: gemini-2.5-flash}]\n"
    reloader, path, _ = reloader_for(tmp_path, before)
    path.write_text(
        "upstreams:\n  eu: {base_url: 'http://eu2.example'}\n"
        "routes: [{models: gemini-flash, model: gemini-3-flash, upstream: eu}]\n"
        "tenants: {acme: {upstreams: [eu]}}\n"
        "retries: {max_attempts: 1}\n"
    )

    result = asyncio.run(reloader.reload())

    assert result.applied
    assert result.restart_needed == (
        "retries.max_attempts: changed; takes effect after a restart",
        "upstreams.eu.base_url: changed; takes effect after a restart",
    )
    routing = reloader.current.for_tenant("acme").routing
    route = routing.route_for("gemini-flash", "acme")
    assert route is not None
    assert (route.model, route.chain, routing.allowed) == (
        "gemini-3-flash",
        ("eu",),
        frozenset({"eu"}),
    )
