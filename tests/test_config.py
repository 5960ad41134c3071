"""Configuration: defaults, environment overrides, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from localgate.config import load_settings
from localgate.errors import ConfigError

EXAMPLE = Path(__file__).parent.parent / "config" / "localization.yaml"


def test_no_file_gives_sensible_defaults() -> None:
    settings, source = load_settings(None, {})

    assert source is None
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 8080)
    assert settings.server.max_body_bytes == 20 * 1024 * 1024
    assert settings.upstream.base_url == "https://generativelanguage.googleapis.com"
    assert settings.upstream_api_key is None
    assert settings.access_log_path == Path("data/logs/access.log")
    assert settings.state_db_path == Path("data/localgate.db")


def test_shipped_example_is_valid() -> None:
    settings, _ = load_settings(EXAMPLE, {})

    assert settings.proxy.enable_audit is True
    assert settings.cache.vector_store == "chroma"


def test_the_example_file_holds_exactly_the_defaults() -> None:
    # Its header promises every setting with its default: an example value left active
    # (a tenant whose retrieval collection does not exist, say) would change what a new
    # user's gateway does.
    example, _ = load_settings(EXAMPLE, {})
    defaults, _ = load_settings(None, {})

    assert example == defaults


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("data_dir: /from/file\nupstream:\n  base_url: http://file:1\n")

    settings, source = load_settings(
        None,
        {
            "LOCALGATE_CONFIG": str(config),
            "LOCALGATE_DATA_DIR": str(tmp_path / "state"),
            "LOCALGATE_UPSTREAM_URL": "http://127.0.0.1:9/",
            "GEMINI_API_KEY": " AIza-from-env ",
        },
    )

    assert source == config
    assert settings.data_dir == tmp_path / "state"
    assert settings.upstream.base_url == "http://127.0.0.1:9"
    assert settings.upstream_api_key is not None
    assert settings.upstream_api_key.reveal() == "AIza-from-env"
    assert "AIza" not in repr(settings)


def test_upstream_key_from_a_file(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("AIza-from-file\n")
    config = tmp_path / "c.yaml"
    config.write_text(f"upstream:\n  api_key_file: {key_file}\n")

    settings, _ = load_settings(config, {})

    assert settings.upstream_api_key is not None
    assert settings.upstream_api_key.reveal() == "AIza-from-file"


def problems(tmp_path: Path, text: str) -> list[str]:
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(config, {})
    return caught.value.problems


def test_every_problem_is_listed_with_its_field_path(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        "upstream:\n  timeout_s: 0\n  base_url: ftp://x\nserver:\n  port: 70000\n  colour: red\n",
    )

    assert sorted(found) == [
        "server.colour: unknown setting",
        "server.port: must be <= 65535",
        "upstream.base_url: must be an http:// or https:// URL with a host",
        "upstream.timeout_s: must be > 0",
    ]


def test_wrong_types_and_choices(tmp_path: Path) -> None:
    found = problems(tmp_path, "cache:\n  vector_store: faiss\nproxy:\n  enable_audit: maybe\n")

    assert any(p.startswith("cache.vector_store: input should be 'chroma'") for p in found)
    assert any(p.startswith("proxy.enable_audit: ") for p in found)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    found = problems(tmp_path, "server:\n  port: [1,\n")

    assert len(found) == 1
    assert "line" in found[0]


def test_upstream_key_is_not_accepted_in_the_file(tmp_path: Path) -> None:
    found = problems(tmp_path, "upstream_api_key: AIza\n")

    assert "GEMINI_API_KEY" in found[0]


def test_unreadable_key_file(tmp_path: Path) -> None:
    found = problems(tmp_path, f"upstream:\n  api_key_file: {tmp_path / 'missing'}\n")

    assert found[0].startswith("upstream.api_key_file: cannot read")


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(tmp_path / "nope.yaml", {})

    assert "cannot read the file" in caught.value.problems[0]


def test_upstream_url_with_credentials_is_refused(tmp_path: Path) -> None:
    found = problems(tmp_path, "upstream:\n  base_url: http://svc:S3cret@127.0.0.1:1\n")

    assert found[0].startswith("upstream.base_url: must not contain a user name or password")


def test_tenants_change_the_cache_and_retrieval_settings_they_name(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "cache: {enabled: true, ttl_s: 60}\n"
        "rag: {collection: handbook, top_k: 2}\n"
        "tenants:\n"
        "  acme:\n"
        "    cache: {semantic: true, ttl_s: 5}\n"
        "    rag: {enabled: true}\n"
        "    local_embeddings: true\n"
    )

    settings, _ = load_settings(config, {})
    acme, other = settings.cache_for("acme"), settings.cache_for("globex")

    assert (acme.semantic.enabled, acme.ttl_s, acme.semantic.threshold) == (True, 5, 0.98)
    assert (other.semantic.enabled, other.ttl_s) == (False, 60)
    assert settings.rag_for("acme").enabled
    assert settings.rag_for("acme").collection == settings.rag_for("globex").collection
    assert not settings.rag_for("globex").enabled
    assert settings.local_embeddings_for("acme")
    assert not settings.local_embeddings_for("globex")


def test_protocol_limits_must_be_sane(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        "server:\n  max_header_bytes: 100\n  header_timeout_s: 0\n  body_timeout_s: -1\n"
        "  max_pending_connections_per_ip: -1\n  keep_alive_timeout_s: 0\n",
    )

    assert sorted(found) == [
        "server.body_timeout_s: must be > 0",
        "server.header_timeout_s: must be > 0",
        "server.keep_alive_timeout_s: must be >= 1",
        "server.max_header_bytes: must be >= 1024",
        "server.max_pending_connections_per_ip: must be >= 0",
    ]


def test_limits_are_resolved_per_tenant_and_key_from_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "limits:\n  default:\n    requests_per_minute: 60\n    tokens_per_minute: 1000\n"
        "tenants:\n  acme:\n    limits:\n      requests_per_minute: 600\n      priority: high\n"
        "      keys:\n        k_1:\n          requests_per_minute: 5\n"
    )
    settings, _ = load_settings(path, {})

    acme = settings.limits_for("acme")
    assert (acme.requests_per_minute, acme.tokens_per_minute, acme.priority) == (600, 1000, "high")
    key = acme.keys["k_1"]
    # A key's counters are its own; its class and queue settings come from its tenant.
    assert (key.requests_per_minute, key.tokens_per_minute, key.priority) == (5, None, "high")
    other = settings.limits_for("other")
    assert (other.requests_per_minute, other.priority) == (60, "normal")


def test_bad_limits_are_refused_with_their_field_paths(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "limits:\n  backend: redis\n"
        "tenants:\n  acme:\n    limits:\n      requests_per_minute: 0\n"
        "      keys:\n        k_1:\n          priority: urgent\n"
    )

    with pytest.raises(ConfigError) as error:
        load_settings(path, {})

    problems = "\n".join(error.value.problems)
    assert "tenants.acme.limits.requests_per_minute: must be >= 1" in problems
    assert "tenants.acme.limits.keys.k_1.priority:" in problems
    assert "limits.redis_url: required when limits.backend is redis" in problems


def test_the_redis_url_comes_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("limits:\n  backend: redis\n")

    settings, _ = load_settings(path, {"LOCALGATE_REDIS_URL": "redis://redis:6379/2"})

    assert settings.limits.redis_url == "redis://redis:6379/2"


def test_database_url_moves_the_audit_trail_to_postgres_too(tmp_path: Path) -> None:
    url = "postgresql://localgate:s3cret@db:5432/localgate"
    settings, _ = load_settings(None, {"LOCALGATE_DATABASE_URL": url})

    assert settings.database_url == url
    assert settings.shared_state
    assert settings.audit.store == "postgres"
    assert settings.audit.postgres_dsn == url
    assert "s3cret" not in repr(settings)
    # A separate audit database stays separate.
    config = tmp_path / "c.yaml"
    config.write_text(f"database_url: {url}\naudit:\n  postgres_dsn: postgresql://audit@a/b\n")
    settings, _ = load_settings(config, {})
    assert settings.audit.postgres_dsn == "postgresql://audit@a/b"
    assert not load_settings(None, {})[0].shared_state


def test_database_url_with_a_sqlite_audit_store_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("database_url: postgresql://db/x\naudit:\n  store: sqlite\n")

    with pytest.raises(ConfigError) as caught:
        load_settings(config, {})

    assert any("audit.store: with database_url set" in line for line in caught.value.problems)


def test_sign_checkpoints_false_means_the_signer_never_signs(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("audit:\n  sign_checkpoints: false\n  checkpoint_signer: always\n")

    settings, _ = load_settings(config, {})

    assert settings.audit.signer_mode == "never"
    assert load_settings(None, {})[0].audit.signer_mode == "auto"
