"""The upstreams, routes, retries and residency sections: what a bad file is told."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from localgate.cli import main
from localgate.config import load_settings
from localgate.errors import ConfigError

UPSTREAMS = """
upstreams:
  eu: {base_url: "http://eu.example/", api_key_env: [EU_KEY_1, EU_KEY_2]}
  us: {base_url: "http://us.example", api_key_file: KEYFILE}
"""


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_settings(path, {})
    return raised.value.problems


def test_named_upstreams_get_their_key_pools(tmp_path: Path) -> None:
    key_file = tmp_path / "us.keys"
    key_file.write_text("us-1\n\nus-2\nus-1\n")
    path = tmp_path / "c.yaml"
    path.write_text(UPSTREAMS.replace("KEYFILE", str(key_file)))

    settings, _ = load_settings(path, {"EU_KEY_1": "eu-1", "EU_KEY_2": " eu-2 "})

    assert settings.upstreams["eu"].base_url == "http://eu.example"
    pools = {name: [k.reveal() for k in keys] for name, keys in settings.upstream_keys.items()}
    assert pools == {"eu": ["eu-1", "eu-2"], "us": ["us-1", "us-2"]}
    assert "eu-1" not in repr(settings)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "routes: [{models: '*', upstream: nowhere}]",
            "routes.0.upstream: unknown upstream 'nowhere'; known: default",
        ),
        (
            "routes: [{models: x, fallback: [default]}]",
            "routes.0.fallback: fallback cycle default -> default",
        ),
        (
            "tenants: {acme: {upstreams: [moon]}}",
            "tenants.acme.upstreams: unknown upstream 'moon'",
        ),
        (
            "upstreams: {default: {base_url: 'http://x'}}",
            "upstreams.default: the upstream named default is the upstream: section",
        ),
        ("upstreams: {eu: {base_url: 'ftp://x'}}", "upstreams.eu.base_url: must be an http"),
        ("routes: [{models: []}]", "routes.0.models: needs at least one model name or glob"),
        ("retries: {max_attempts: 0}", "retries.max_attempts: must be >= 1"),
    ],
)
def test_bad_routing_is_refused_with_its_field_path(
    tmp_path: Path, text: str, expected: str
) -> None:
    found = problems(tmp_path, text)

    assert any(problem.startswith(expected) for problem in found), found


def test_a_fallback_cycle_through_several_upstreams_is_named(tmp_path: Path) -> None:
    text = UPSTREAMS.replace("KEYFILE", "/nonexistent") + (
        "routes: [{models: '*', upstream: eu, fallback: [us, default, us]}]\n"
    )
    found = problems(tmp_path, text)

    assert found == [
        "routes.0.fallback: fallback cycle us -> default -> us; an upstream appears once in a route"
    ]


def test_check_states_the_most_attempts_a_request_can_make(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "upstreams: {eu: {base_url: 'http://eu.example', api_key_env: EU_KEY}}\n"
        "retries: {max_attempts: 5, attempts_per_upstream: 2}\n"
        "routes:\n"
        "  - {models: gemini-flash, model: gemini-2.5-flash, fallback: [eu]}\n"
        "tenants: {acme: {upstreams: [eu]}}\n"
    )

    result = CliRunner().invoke(main, ["check", "--config", str(config)])

    assert result.exit_code == 0, result.output
    assert "route 0: gemini-flash as gemini-2.5-flash -> default -> eu; at most 4" in result.output
    assert "other models -> default; at most 2 attempt(s)" in result.output
    assert "tenant acme may reach only: eu" in result.output
    assert "a request makes at most 4 upstream attempt(s)" in result.output
    assert "upstream 'eu' has no API key" in result.output


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("routes: [{split: [{model: x}]}]", "routes.0.split.0.weight: is required"),
        ("routes: [{split: [{model: x, weight: 0}]}]", "routes.0: split: the weights add up to 0"),
        (
            "routes: [{split: [{upstream: moon, weight: 1}]}]",
            "routes.0.split.0.upstream: unknown upstream 'moon'",
        ),
        (
            "routes: [{upstream: default, fallback: [moon]}]",
            "routes.0.fallback: unknown upstream 'moon'",
        ),
    ],
)
def test_bad_splits_are_refused_with_their_field_path(
    tmp_path: Path, text: str, expected: str
) -> None:
    found = problems(tmp_path, text)

    assert any(problem.startswith(expected) for problem in found), found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("upstreams: {eu: {kind: gemini}}", "upstreams.eu: base_url is required for kind: gemini"),
        (
            "upstreams: {vx: {kind: vertex, location: europe-west4, credentials_file: f}}",
            "upstreams.vx: project is required for kind: vertex",
        ),
        (
            "upstreams: {vx: {kind: vertex, project: acme-prod, location: us-central1,"
            " credentials_file: f, api_key_env: K}}",
            "upstreams.vx: api_key_env and api_key_file are for kind: gemini and openai upstreams",
        ),
        (
            "upstreams: {vllm: {kind: openai}}",
            "upstreams.vllm: base_url is required for kind: openai",
        ),
        (
            "upstreams: {eu: {kind: gemini, base_url: 'https://x', redaction: false}}",
            "upstreams.eu: models and redaction are for kind: openai upstreams",
        ),
        (
            "upstreams: {vllm: {kind: openai, base_url: 'http://v:8000/v1', models: {'a b': c}}}",
            "upstreams.vllm.models: 'a b' is not a model name",
        ),
        (
            "upstreams: {vllm: {kind: openai, base_url: 'http://v:8000/v1', project: acme-prod}}",
            "upstreams.vllm: project, location and credentials_file are for kind: vertex",
        ),
    ],
)
def test_each_kind_of_upstream_gets_what_it_needs(tmp_path: Path, text: str, expected: str) -> None:
    found = problems(tmp_path, text)

    assert any(problem.startswith(expected) for problem in found), found


def test_a_vertex_upstream_defaults_to_its_regional_endpoint(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "upstreams: {vx: {kind: vertex, project: acme-prod, location: europe-west4,"
        " credentials_file: sa.json}}\n"
    )

    settings, _ = load_settings(path, {})

    assert settings.upstreams["vx"].url == "https://europe-west4-aiplatform.googleapis.com"


def test_check_says_which_routes_are_not_redacted(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "upstreams:\n"
        "  a: {kind: openai, base_url: 'http://a:8000/v1', redaction: false}\n"
        "  b: {kind: openai, base_url: 'http://b:8000/v1'}\n"
        "routes:\n"
        "  - {models: inhouse, upstream: a}\n"
        "  - {models: mixed, upstream: a, fallback: [default]}\n"
        "  - {models: redacted, upstream: b}\n"
    )

    result = CliRunner().invoke(main, ["check", "--config", str(config)])

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [
        line.startswith("route ") and "NOT redacted" in line
        for line in lines
        if line.startswith("route ")
    ] == [
        True,
        False,
        False,
    ]
    # Keys are optional for an OpenAI-compatible server: no note about them.
    assert "has no API key" not in result.output
