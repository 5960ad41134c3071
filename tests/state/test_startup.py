"""Start-up problems of `localgate serve` on shared state: one line each naming the setting,
exit code 1, no traceback. Real `localgate serve` processes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from localgate.cli import main
from localgate.testing import FakeGemini
from tests.audit.conftest import postgres_schema
from tests.audit.test_replica_keys import cli, environment
from tests.conftest import STARTUP_TIMEOUT_S
from tests.gateway_process import free_port


@pytest.fixture
def dsn() -> Iterator[str]:
    with postgres_schema() as found:
        yield found


def serve(env: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "localgate", "serve", *options]
    if "--port" not in options:
        command += ["--port", str(free_port())]
    return subprocess.run(  # noqa: S603 - this interpreter, the gateway under test
        command, env=env, capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S, check=False
    )


def lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The `localgate: cannot start:` lines of a refused start (exit 1, no traceback)."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return [
        line.removeprefix("localgate: cannot start: ")
        for line in result.stderr.splitlines()
        if line.startswith("localgate: cannot start: ")
    ]


def keyed(env: dict[str, str], keys: Path) -> dict[str, str]:
    return {
        **env,
        "LOCALGATE_AUDIT_MASTER_KEY": (keys / "master.key").read_text(),
        "LOCALGATE_SIGNATURE_KEY": (keys / "seal.key").read_text(),
    }


def config_with_signing_key(tmp_path: Path, keys: Path) -> Path:
    config = tmp_path / "replica.yaml"
    config.write_text(f"audit:\n  signing_key_file: {keys / 'signing.key'}\n")
    return config


def test_an_unreachable_database_is_one_line(tmp_path: Path, upstream: FakeGemini) -> None:
    keys = tmp_path / "keys"
    url = f"postgresql://nobody:hunter2@127.0.0.1:{free_port()}/none"
    env = environment(tmp_path / "data", upstream, LOCALGATE_DATABASE_URL=url)
    cli(env, "audit", "keygen", "--out", str(keys))

    result = serve(keyed(env, keys), "--config", str(config_with_signing_key(tmp_path, keys)))

    found = lines(result)
    assert found[0].startswith("database_url: cannot connect to PostgreSQL:"), found
    assert "hunter2" not in result.stderr


def test_bad_credentials_are_one_line(tmp_path: Path, upstream: FakeGemini, dsn: str) -> None:
    keys = tmp_path / "keys"
    url = dsn.replace("postgresql://postgres@", "postgresql://no_such_role_lg:pw@")
    env = environment(tmp_path / "data", upstream, LOCALGATE_DATABASE_URL=url)
    cli(env, "audit", "keygen", "--out", str(keys))

    found = lines(serve(keyed(env, keys), "--config", str(config_with_signing_key(tmp_path, keys))))

    assert found[0].startswith("database_url: cannot connect to PostgreSQL:"), found
    assert "no_such_role_lg" in found[0]


def test_missing_keys_are_named_and_never_created(
    tmp_path: Path, upstream: FakeGemini, dsn: str
) -> None:
    data = tmp_path / "data"
    env = environment(data, upstream, LOCALGATE_DATABASE_URL=dsn)

    found = lines(serve(env))

    assert any(
        line.startswith("proxy.signature_key_file / LOCALGATE_SIGNATURE_KEY: no") for line in found
    ), found
    assert any(line.startswith("audit.master_key_file: no audit master key") for line in found)
    assert all("database_url" in line for line in found)
    assert not data.exists() or not list(data.glob("*.key"))


def test_a_port_in_use_is_one_line(tmp_path: Path, upstream: FakeGemini) -> None:
    env = environment(tmp_path / "data", upstream)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        found = lines(serve(env, "--host", "127.0.0.1", "--port", str(port)))

    assert found == [f"server.port: cannot listen on 127.0.0.1:{port}: Address already in use"]


def test_a_replica_with_another_seal_key_refuses_to_start(
    tmp_path: Path, upstream: FakeGemini, dsn: str
) -> None:
    keys, other = tmp_path / "keys", tmp_path / "other"
    env = environment(tmp_path / "data", upstream, LOCALGATE_DATABASE_URL=dsn)
    cli(env, "audit", "keygen", "--out", str(keys))
    cli(env, "audit", "keygen", "--out", str(other))
    config = config_with_signing_key(tmp_path, keys)
    # The first replica's start-up check records the seal key's fingerprint (then it is
    # stopped by a port in use, before serving: enough to have been checked).
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        lines(serve(keyed(env, keys), "--config", str(config), "--port", port))

    found = lines(
        serve(
            {**keyed(env, keys), "LOCALGATE_SIGNATURE_KEY": (other / "seal.key").read_text()},
            "--config",
            str(config),
        )
    )

    assert len(found) == 1, found
    assert found[0].startswith(
        "proxy.signature_key_file / LOCALGATE_SIGNATURE_KEY: this gateway's thought-signature "
        "seal key"
    )


def test_the_keys_command_on_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    url = f"postgresql://nobody:hunter2@127.0.0.1:{free_port()}/none"

    result = CliRunner().invoke(
        main, ["keys", "list"], env={"LOCALGATE_DATABASE_URL": url, "LOCALGATE_CONFIG": ""}
    )

    assert result.exit_code == 1
    assert result.output.startswith("Error: database_url: cannot connect to PostgreSQL:")
    assert "hunter2" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_keys_made_with_the_cli_live_in_the_shared_database(tmp_path: Path, dsn: str) -> None:
    env = {"LOCALGATE_DATABASE_URL": dsn, "LOCALGATE_DATA_DIR": str(tmp_path / "data")}
    created = json.loads(cli(env, "keys", "create", "--tenant", "acme", "--json"))
    cli(env, "keys", "revoke", created["key_id"])

    listed = [json.loads(line) for line in cli(env, "keys", "list", "--json").splitlines()]

    assert [(key["key_id"], key["tenant"]) for key in listed] == [(created["key_id"], "acme")]
    assert listed[0]["revoked_at"] is not None
    assert not (tmp_path / "data" / "localgate.db").exists()


def test_a_failure_while_the_gateway_builds_itself_is_one_line_and_closes_what_it_opened(
    tmp_path: Path,
) -> None:
    # Past the checks before the start: the vector store's directory is a file, which only
    # opening the store (inside the server's start) finds out.
    data = tmp_path / "data"
    data.mkdir()
    (data / "chroma").touch()
    config = tmp_path / "localgate.yaml"
    config.write_text("cache:\n  enabled: true\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "LOCALGATE_DATA_DIR": str(data),
        "LOCALGATE_CONFIG": str(config),
        "GEMINI_API_KEY": "upstream-key",
    }

    quiet = serve(env, "--port", str(free_port()), "--admin-port", "0")
    loud = serve(env, "--port", str(free_port()), "--admin-port", "0", "--debug")

    assert quiet.returncode != 0
    output = quiet.stdout + quiet.stderr
    assert "Traceback" not in output
    assert "cannot start: NotADirectoryError" in output
    assert "chroma" in output
    # What it opened before failing is closed, not left to the garbage collector.
    assert "Unclosed" not in output
    assert loud.returncode != 0
    assert "Traceback" in loud.stdout + loud.stderr
