"""compose.yaml: a valid Compose file (the real `docker compose config`, no engine needed)
whose files, services and settings fit together: the two replicas share what they must, the
load balancer, Prometheus and Grafana find them, nothing secret is written inline."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from localgate.audit.checkpoint import load_signer
from localgate.audit.crypto import load_or_create_master_key
from localgate.config import Settings, load_settings
from localgate.secret import load_or_create_key
from tests.deploy.tools import MAKE_KEYS, ROOT, load_yaml, make_keys, tool

REPLICAS = ("gateway-1", "gateway-2")
TEST_SERVICES = {"test-postgres", "test-redis", "test-chroma"}


@cache
def compose(*profiles: str) -> dict[str, Any]:
    """The file as Docker Compose resolves it (anchors merged, paths absolute)."""
    arguments = [part for profile in profiles for part in ("--profile", profile)]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    environment.pop("GEMINI_API_KEY", None)
    result = subprocess.run(  # noqa: S603 - docker compose config on the repository's file
        [tool("docker-compose"), *arguments, "config", "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


def services() -> dict[str, Any]:
    found: dict[str, Any] = compose()["services"]
    return found


def binds(service: dict[str, Any]) -> dict[str, Path]:
    """A service's bind mounts: target -> source in the repository."""
    return {
        volume["target"]: Path(volume["source"])
        for volume in service.get("volumes", [])
        if volume["type"] == "bind"
    }


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Every mount of a service: target -> source (a volume's name or a path)."""
    return {volume["target"]: volume["source"] for volume in service.get("volumes", [])}


def gateway_settings_file() -> Path:
    return binds(services()["gateway-1"])["/etc/localgate/localgate.yaml"]


def gateway_settings() -> Settings:
    """The replicas' settings, under the environment compose gives them (the Google key,
    a secret file at run time, given as the variable that wins over it)."""
    environment = {**services()["gateway-1"]["environment"], "GEMINI_API_KEY": "AIza-test"}
    return load_settings(gateway_settings_file(), environment)[0]


def test_docker_compose_accepts_the_file_with_and_without_the_test_profile() -> None:
    stack = set(services())
    everything = set(compose("test")["services"])

    assert {*REPLICAS, "loadbalancer", "postgres", "redis", "chroma", "prometheus"} <= stack
    assert {"grafana", "otel-collector", "keys", "migrate"} <= stack
    assert not stack & TEST_SERVICES
    assert everything == stack | TEST_SERVICES


def test_every_file_a_service_mounts_is_in_the_repository() -> None:
    missing = [
        f"{name}: {source}"
        for name, service in compose("test")["services"].items()
        for source in binds(service).values()
        if not source.exists() and source.name != "localgate.json"
    ]

    assert missing == []
    for source in (b for s in services().values() for b in binds(s).values()):
        assert source.resolve().is_relative_to(ROOT), source


def test_grafana_s_dashboard_is_the_one_in_the_repository() -> None:
    dashboard = binds(services()["grafana"])["/var/lib/grafana/dashboards/localgate.json"]
    provider = load_yaml(
        binds(services()["grafana"])["/etc/grafana/provisioning/dashboards"] / "localgate.yaml"
    )

    assert dashboard == ROOT / "deploy" / "grafana" / "localgate.json"
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    if not dashboard.exists():
        # deploy/grafana/localgate.json comes with the dashboard's own change.
        if os.environ.get("CI") == "true":
            pytest.fail(f"{dashboard} is missing")
        pytest.skip(f"{dashboard} is not in this checkout yet")
    board = json.loads(dashboard.read_text())
    assert board["panels"]
    # Its panels ask for a Prometheus data source: the one provisioned is Prometheus and the
    # default, so the dashboard works without an import step.
    datasources = load_yaml(
        binds(services()["grafana"])["/etc/grafana/provisioning/datasources"] / "prometheus.yaml"
    )["datasources"]
    assert [(d["type"], d["isDefault"]) for d in datasources] == [("prometheus", True)]
    chooser = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert all(v["query"] == "prometheus" for v in chooser)


def test_every_dependency_is_a_service_of_the_stack_and_one_shots_run_first() -> None:
    stack = services()

    for name, service in stack.items():
        for needed in service.get("depends_on", {}):
            assert needed in stack, f"{name} depends on {needed}"
    for replica in REPLICAS:
        needs = stack[replica]["depends_on"]
        assert needs["migrate"]["condition"] == "service_completed_successfully"
        assert needs["redis"]["condition"] == "service_healthy"
    assert stack["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert stack["postgres"]["depends_on"]["keys"]["condition"] == "service_completed_successfully"
    assert stack["migrate"]["command"] == ["migrate"]


def test_the_replicas_share_image_configuration_database_keys_and_stores() -> None:
    first, second = (services()[name] for name in REPLICAS)

    for field in ("image", "environment", "secrets", "networks", "read_only"):
        assert first[field] == second[field], field
    shared = {k: v for k, v in mounts(first).items() if k != "/var/lib/localgate"}
    assert shared == {k: v for k, v in mounts(second).items() if k != "/var/lib/localgate"}
    assert set(shared) == {"/etc/localgate/localgate.yaml", "/etc/localgate/keys"}
    # Each has a data directory of its own (pid file, access log, spool).
    assert mounts(first)["/var/lib/localgate"] != mounts(second)["/var/lib/localgate"]
    # The migration runs against the same database with the same configuration, read with
    # the same environment (without LOCALGATE_REDIS_URL, limits.backend: redis is refused).
    migrate = services()["migrate"]
    assert migrate["environment"] == first["environment"]
    assert (
        mounts(migrate)["/etc/localgate/localgate.yaml"] == shared["/etc/localgate/localgate.yaml"]
    )
    assert mounts(migrate)["/etc/localgate/keys"] == shared["/etc/localgate/keys"]


def test_the_urls_the_replicas_are_given_name_the_stack_s_services_and_ports() -> None:
    stack = services()
    environment = stack["gateway-1"]["environment"]
    settings = gateway_settings()
    postgres = urlsplit(environment["LOCALGATE_DATABASE_URL"])
    redis = urlsplit(environment["LOCALGATE_REDIS_URL"])
    chroma = urlsplit(settings.cache.chroma_url or "")
    otlp = urlsplit(environment["OTEL_EXPORTER_OTLP_ENDPOINT"])

    assert (postgres.hostname, postgres.port) == ("postgres", 5432)
    assert postgres.path.lstrip("/") == stack["postgres"]["environment"]["POSTGRES_DB"]
    assert postgres.username == stack["postgres"]["environment"]["POSTGRES_USER"]
    assert (redis.hostname, redis.port) == ("redis", 6379)
    assert (chroma.hostname, chroma.port) == ("chroma", 8000)
    assert (otlp.hostname, otlp.port) == ("otel-collector", 4318)
    collector = load_yaml(binds(stack["otel-collector"])["/etc/otelcol/config.yaml"])
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    # The stores are reachable from the replicas' networks.
    for store in ("postgres", "redis", "chroma"):
        assert set(stack[store]["networks"]) & set(stack["gateway-1"]["networks"]), store
    assert set(stack["otel-collector"]["networks"]) & set(stack["gateway-1"]["networks"])


def test_the_collector_s_pipeline_uses_only_components_it_defines() -> None:
    collector = load_yaml(binds(services()["otel-collector"])["/etc/otelcol/config.yaml"])
    (pipeline,) = collector["service"]["pipelines"].values()

    assert list(collector["service"]["pipelines"]) == ["traces"]
    for kind in ("receivers", "processors", "exporters"):
        assert pipeline[kind], kind
        assert set(pipeline[kind]) <= set(collector[kind]), kind
    # memory_limiter first, as the collector's documentation requires.
    assert pipeline["processors"][0] == "memory_limiter"


def test_the_replicas_configuration_shares_state_and_reads_every_secret_from_a_file() -> None:
    replica = services()["gateway-1"]
    settings = gateway_settings()
    keys = PurePosixPath("/etc/localgate/keys")
    secrets = {s["target"] for s in replica["secrets"]}

    assert settings.audit.store == "postgres"
    assert settings.limits.backend == "redis"
    assert settings.cache.enabled
    assert PurePosixPath(str(settings.audit.master_key_file)).parent == keys
    assert PurePosixPath(str(settings.audit.signing_key_file)).parent == keys
    assert PurePosixPath(str(settings.proxy.signature_key_file)).parent == keys
    assert str(settings.upstream.api_key_file) in secrets
    for secret in replica["secrets"]:
        assert (secret["uid"], secret["gid"], secret["mode"]) == ("10001", "10001", "0400")
    assert PurePosixPath(replica["environment"]["PGPASSFILE"]).parent == keys
    assert settings.server.host == "0.0.0.0"  # noqa: S104
    assert settings.server.drain_delay_s > 0
    assert float(replica["stop_grace_period"].rstrip("s")) > (
        settings.server.drain_delay_s + settings.server.drain_timeout_s
    )


def test_no_password_key_or_token_is_written_into_the_file() -> None:
    for name, service in compose("test")["services"].items():
        for variable, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET|TOKEN|_KEY$", variable):
                assert variable.endswith("_FILE"), f"{name}: {variable}"
            if "://" in str(value):
                assert urlsplit(str(value)).password is None, f"{name}: {variable}"
    assert compose()["secrets"]["gemini_api_key"]["environment"] == "GEMINI_API_KEY"
    text = (ROOT / "compose.yaml").read_text()
    assert not re.search(r"AIza[0-9A-Za-z_-]{35}", text)


def test_the_load_balancer_sends_to_every_ready_replica_and_the_gateways_believe_only_it() -> None:
    stack = services()
    config = binds(stack["loadbalancer"])["/usr/local/etc/haproxy/haproxy.cfg"].read_text()
    servers = re.findall(r"^\s*server (\S+) (\S+):(\d+) check$", config, re.MULTILINE)
    settings = gateway_settings()
    address = stack["loadbalancer"]["networks"]["edge"]["ipv4_address"]

    assert {(name, host) for name, host, _ in servers} == {(r, r) for r in REPLICAS}
    assert {int(port) for *_, port in servers} == {settings.server.port}
    assert "option httpchk GET /readyz" in config
    # A stream may wait upstream.timeout_s for its next bytes; the balancer waits longer.
    timeout = int(re.search(r"timeout server (\d+)s", config)[1])  # type: ignore[index]
    assert timeout > settings.upstream.timeout_s
    assert settings.server.trusted_proxies == [address]
    assert stack["loadbalancer"]["ports"][0]["host_ip"] == "127.0.0.1"


def test_prometheus_scrapes_both_replicas_and_loads_the_shipped_alerts() -> None:
    prometheus = services()["prometheus"]
    config = load_yaml(binds(prometheus)["/etc/prometheus/prometheus.yml"])
    (job,) = config["scrape_configs"]
    targets = {t for group in job["static_configs"] for t in group["targets"]}

    assert targets == {f"{replica}:8080" for replica in REPLICAS}
    assert job["metrics_path"] == "/metrics"
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    assert binds(prometheus)["/etc/prometheus/alerts.yml"] == (
        ROOT / "deploy" / "prometheus" / "alerts.yml"
    )
    datasources = load_yaml(
        binds(services()["grafana"])["/etc/grafana/provisioning/datasources"] / "prometheus.yaml"
    )
    assert urlsplit(datasources["datasources"][0]["url"]).hostname == "prometheus"


def test_promtool_accepts_the_prometheus_configuration_with_the_shipped_rules(
    tmp_path: Path,
) -> None:
    prometheus = services()["prometheus"]
    config = load_yaml(binds(prometheus)["/etc/prometheus/prometheus.yml"])
    # The rules at the path the container sees are the repository's file.
    config["rule_files"] = [str(binds(prometheus)[path]) for path in config["rule_files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))

    result = subprocess.run(  # noqa: S603 - promtool on a copy of the repository's file
        [tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_published_ports_are_loopback_only_and_the_test_services_match_the_tests() -> None:
    published = [
        (name, port["published"], port.get("host_ip"))
        for name, service in compose("test")["services"].items()
        for port in service.get("ports", [])
    ]
    test = compose("test")["services"]

    assert all(host_ip == "127.0.0.1" for *_, host_ip in published), published
    assert len({port for _, port, _ in published}) == len(published), published
    assert {(n, p) for n, p, _ in published if n in TEST_SERVICES} == {
        ("test-postgres", "5432"),
        ("test-redis", "6379"),
        ("test-chroma", "8000"),
    }
    # What tests/audit/conftest.py and the README expect: trust auth, database test.
    assert test["test-postgres"]["environment"] == {
        "POSTGRES_HOST_AUTH_METHOD": "trust",
        "POSTGRES_DB": "test",
    }
    assert all(test[name]["profiles"] == ["test"] for name in TEST_SERVICES)
    readme = (ROOT / "README.md").read_text()
    assert "docker compose up -d test-postgres" in readme


def test_the_key_script_makes_every_key_once_owner_only_and_they_load(tmp_path: Path) -> None:
    assert binds(services()["keys"])["/opt/localgate/make-keys.sh"] == MAKE_KEYS

    def contents() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for f in folders.values() for p in sorted(f.iterdir())}

    folders = make_keys(tmp_path)
    first = contents()
    make_keys(tmp_path)
    second = contents()

    keys = folders["keys"]
    assert {p.name for p in keys.iterdir()} == {
        "master.key",
        "signing.key",
        "seal.key",
        "pgpass",
    }
    for path in keys.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert second == first  # never overwritten
    load_or_create_master_key(None, keys / "master.key", create=False)
    load_signer(keys / "signing.key")
    assert len(load_or_create_key(None, keys / "seal.key")) == 32
    password = (folders["postgres"] / "password").read_text().strip()
    assert len(password) >= 32
    assert (keys / "pgpass").read_text() == f"postgres:5432:localgate:localgate:{password}\n"
    # The files the database's and Grafana's own users read.
    for secret in (folders["postgres"] / "password", folders["grafana"] / "admin-password"):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o444


def test_every_deployment_file_docs_deploy_names_is_in_the_repository() -> None:
    guide = (ROOT / "docs" / "deploy.md").read_text()
    named = set(
        re.findall(r"`((?:deploy/[\w./-]+)|compose\.yaml|Dockerfile|\.dockerignore)`", guide)
    )

    assert {"compose.yaml", "Dockerfile", "deploy/haproxy/haproxy.cfg"} <= named
    # The dashboard comes with its own change (test_grafana_s_dashboard_is_...).
    missing = [
        path
        for path in named
        if not (ROOT / path).exists() and path != "deploy/grafana/localgate.json"
    ]
    assert missing == []
