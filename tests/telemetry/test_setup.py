"""When tracing is on, and how: the settings and the OTEL_* variables, and the cost when off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes

from localgate.config import TelemetrySettings
from localgate.errors import ConfigError
from localgate.telemetry import trace_config
from localgate.telemetry import tracer as tracer_module

ROOT = Path(__file__).resolve().parents[2]


def test_off_by_default_and_without_otel_variables() -> None:
    assert trace_config(TelemetrySettings(), {}) is None
    assert trace_config(TelemetrySettings(), {"OTEL_SERVICE_NAME": "x"}) is None


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"},
        {"OTEL_TRACES_EXPORTER": "otlp"},
    ],
)
def test_an_otel_variable_is_enough_to_turn_it_on(environ: dict[str, str]) -> None:
    config = trace_config(TelemetrySettings(), environ)
    assert config is not None
    assert (config.exporter, config.protocol, config.service_name) == (
        "otlp",
        "http/protobuf",
        "localgate",
    )


@pytest.mark.parametrize(
    "environ", [{"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}]
)
def test_the_standard_switches_turn_it_off_whatever_else_is_set(environ: dict[str, str]) -> None:
    environ = {**environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert trace_config(TelemetrySettings(enabled=True), environ) is None


def test_the_variables_override_the_settings() -> None:
    settings = TelemetrySettings(enabled=True, service_name="gw", sampler="always_on")
    environ = {
        "OTEL_SERVICE_NAME": "edge",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    config = trace_config(settings, environ)
    assert config is not None
    assert (config.service_name, config.sampler, config.sampler_arg, config.protocol) == (
        "edge",
        "parentbased_traceidratio",
        0.25,
        "grpc",
    )


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER"),
        ({"OTEL_TRACES_SAMPLER_ARG": "1.5"}, "OTEL_TRACES_SAMPLER_ARG"),
        ({"OTEL_TRACES_SAMPLER_ARG": "half"}, "OTEL_TRACES_SAMPLER_ARG"),
    ],
)
def test_a_value_it_cannot_use_is_refused_by_name(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        trace_config(TelemetrySettings(enabled=True), environ)


def test_gen_ai_attribute_names_are_the_semantic_conventions() -> None:
    published = {
        value
        for name, value in vars(gen_ai_attributes).items()
        if name.startswith("GEN_AI_") and isinstance(value, str)
    }
    source = Path(tracer_module.__file__).read_text()
    used = {
        word.strip("\"'")
        for word in source.replace("[", " ").replace("]", " ").split()
        if word.startswith('"gen_ai.')
    }
    assert used
    assert used <= published, used - published


def test_an_untraced_gateway_loads_no_opentelemetry(tmp_path: Path) -> None:
    # A whole request through an untraced gateway, in a fresh interpreter.
    script = (
        "import sys\n"
        "from localgate.testing import FakeGemini\n"
        "from tests.conftest import run_gateway\n"
        "from pathlib import Path\n"
        "with FakeGemini() as up, run_gateway(Path(sys.argv[1]), up.base_url) as gateway:\n"
        "    response = gateway.generate({'contents': [{'parts': [{'text': 'hi'}]}]})\n"
        "    assert response.status_code == 200, response.text\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    environ = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", script, str(tmp_path / "data")],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
