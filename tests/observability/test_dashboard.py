"""The shipped Grafana dashboard and alert rules query only metrics a running gateway
exports: names collected from a live /metrics after traffic of every kind."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from localgate.testing import FakeGemini
from tests.conftest import run_gateway

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "localgate.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
HELLO = {"contents": [{"role": "user", "parts": [{"text": "Mail me at ann@example.com"}]}]}
# The series a family is exposed as, beyond its own name.
SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "gauge": ("",),
    "info": ("_info",),
}
# The quality signals' metrics come with the quality package (issue 15, quality signals):
# the dashboard's quality row is checked once that package is part of the gateway.
QUALITY_PREFIX = "localgate_quality_"
HAS_QUALITY = importlib.util.find_spec("localgate.quality") is not None

# Label matchers, grouping clauses and strings name labels and values, never metrics.
_NOT_METRICS = re.compile(
    r"\{[^}]*\}|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)|\"[^\"]*\""
)
_METRIC = re.compile(r"\b(?:localgate|gen_ai)_[a-z0-9_]+\b")


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression reads (recording rules, with ':', are not)."""
    return set(_METRIC.findall(_NOT_METRICS.sub(" ", expression)))


def dashboard_expressions(node: Any) -> Iterator[str]:
    """Every query of the dashboard: panel targets and template variables."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from dashboard_expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_expressions(item)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every series name a gateway's /metrics shows after unary, streamed, refused and
    retried requests (and every name its families can take, before a first sample)."""
    config = (
        "tenants:\n  acme:\n    limits: {requests_per_minute: 4}\n"
        "retries: {backoff_initial_s: 0, backoff_max_s: 0}\n"
    )
    with (
        FakeGemini() as upstream,
        run_gateway(tmp_path_factory.mktemp("gw"), upstream.base_url, config=config) as gateway,
        gateway.client(headers={"x-goog-api-key": gateway.key}) as client,
    ):
        model = "/v1beta/models/gemini-2.5-flash"
        assert client.post(f"{model}:generateContent", json=HELLO).status_code == 200
        upstream.fail_with(503, {"error": {"code": 503, "status": "UNAVAILABLE"}}, times=1)
        assert client.post(f"{model}:generateContent", json=HELLO).status_code == 200
        stream = client.post(f"{model}:streamGenerateContent", params={"alt": "sse"}, json=HELLO)
        assert stream.status_code == 200
        statuses = [client.post(f"{model}:generateContent", json=HELLO).status_code for _ in "ab"]
        assert statuses == [200, 429]
        text = client.get("/metrics").text
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(f"{family.name}{suffix}" for suffix in SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def unknown(read: set[str], exported: set[str]) -> list[str]:
    if not HAS_QUALITY:
        read = {name for name in read if not name.startswith(QUALITY_PREFIX)}
    return sorted(read - exported)


def test_every_metric_the_dashboard_queries_is_exported(exported: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    read = set().union(*(metric_names(e) for e in dashboard_expressions(dashboard)))

    assert len(read) > 30, sorted(read)
    assert unknown(read, exported) == []


def test_every_metric_the_alert_rules_read_is_exported(exported: set[str]) -> None:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    read = set().union(*(metric_names(rule["expr"]) for g in groups for rule in g["rules"]))

    assert "localgate_upstream_circuit_state" in read
    assert unknown(read, exported) == []


def test_the_name_check_can_tell_a_metric_from_a_label() -> None:
    expression = (
        "histogram_quantile(0.99, sum by (le, gen_ai_token_type) (rate(gen_ai_client_token_usage"
        '_bucket{gen_ai_operation_name="x",localgate_fake="y"}[5m]))) / localgate_missing_total'
    )

    assert metric_names(expression) == {
        "gen_ai_client_token_usage_bucket",
        "localgate_missing_total",
    }
    assert unknown({"localgate_missing_total"}, {"localgate_requests_total"}) == [
        "localgate_missing_total"
    ]


def test_every_panel_has_a_query_and_a_unique_place() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    places = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in dashboard["panels"]]

    assert all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in panels)
    assert len(places) == len(set(places))
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    rows = {p["title"] for p in dashboard["panels"] if p["type"] == "row"}
    assert {
        "Traffic",
        "Latency",
        "Errors",
        "Tokens",
        "Redaction",
        "Cache",
        "Limits",
        "Audit health",
        "Upstreams",
    } <= rows
