"""Replicas and their keys: a gateway given a key that is not the audit store's, or none
beside a shared store, refuses to start in one line, instead of starting and then refusing
every request (or signing checkpoints nobody can verify).

Real ``localgate serve`` processes on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx
from click.testing import CliRunner

from localgate.cli import main
from localgate.testing import FakeGemini
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, STARTUP_TIMEOUT_S
from tests.gateway_process import free_port, start

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"


def environment(data: Path, upstream: FakeGemini, **extra: str) -> dict[str, str]:
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("LOCALGATE_")},
        "LOCALGATE_DATA_DIR": str(data),
        "LOCALGATE_UPSTREAM_URL": upstream.base_url,
        "GEMINI_API_KEY": "upstream-key",
    }
    env.update(extra)
    return env


def cli(env: dict[str, str], *arguments: str) -> str:
    result = CliRunner().invoke(main, list(arguments), env=env)
    assert result.exit_code == 0, result.output
    return result.output


def refused_start(
    env: dict[str, str], config: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``localgate serve`` that is expected to exit at once."""
    command = [sys.executable, "-m", "localgate", "serve", "--port", str(free_port())]
    if config is not None:
        command += ["--config", str(config)]
    return subprocess.run(  # noqa: S603 - this interpreter, the gateway under test
        command, env=env, capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S, check=False
    )


def serve_one_request(env: dict[str, str], tmp_path: Path, config: Path | None = None) -> None:
    """Start a gateway, answer one request, stop it cleanly (which signs a checkpoint)."""
    key = json.loads(cli(env, "keys", "create", "--tenant", "acme", "--json"))["key"]
    port = free_port()
    options = ("--config", str(config)) if config is not None else ()
    gateway = start(env, port, tmp_path / "gateway.log", *options)
    try:
        answer = httpx.post(
            f"http://127.0.0.1:{port}{GENERATE}",
            json={"contents": [{"parts": [{"text": "hi"}]}]},
            headers={"x-goog-api-key": key},
            timeout=INFRASTRUCTURE_TIMEOUT_S,
        )
        assert answer.status_code == 200, answer.text
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("localgate:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_gateway_with_another_master_key_refuses_to_start(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    env = environment(tmp_path / "data", upstream)
    serve_one_request(env, tmp_path)  # the store now holds data keys wrapped by its key
    other = tmp_path / "keys"
    cli(env, "audit", "keygen", "--out", str(other))

    line = one_line(
        refused_start({**env, "LOCALGATE_AUDIT_MASTER_KEY": (other / "master.key").read_text()})
    )

    assert line.startswith("localgate: cannot start: audit.master_key_file")
    assert "is not the audit store's" in line


def test_a_gateway_with_another_signing_key_refuses_to_sign_and_to_start(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    env = environment(tmp_path / "data", upstream)
    serve_one_request(env, tmp_path)  # a clean stop signed a checkpoint
    other = tmp_path / "keys"
    cli(env, "audit", "keygen", "--out", str(other))
    config = tmp_path / "other-signer.yaml"
    config.write_text(f"audit:\n  signing_key_file: {other / 'signing.key'}\n")

    line = one_line(refused_start(env, config))

    assert line.startswith("localgate: cannot start: audit.signing_key_file")
    assert "is not the one that signs the audit store's checkpoints" in line
    # What it would have broken is still whole.
    assert "acme: OK" in cli(env, "audit", "verify")


def test_keygen_writes_owner_only_keys_and_never_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "keys"
    printed = cli({}, "audit", "keygen", "--out", str(out))

    for name in ("master.key", "signing.key"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600
    assert "verifier key (public, for auditors): localgate+" in printed
    before = (out / "master.key").read_bytes()
    again = CliRunner().invoke(main, ["audit", "keygen", "--out", str(out)])
    assert again.exit_code != 0
    assert "never overwritten" in again.output
    assert (out / "master.key").read_bytes() == before


def test_replicas_on_postgres_need_keys_given_to_them_and_then_share_one_log(
    tmp_path: Path, upstream: FakeGemini, dsn: str
) -> None:
    # No key material is made next to a shared store: a replica without keys says so.
    first = environment(tmp_path / "first", upstream, LOCALGATE_AUDIT_POSTGRES_DSN=dsn)
    config = tmp_path / "postgres.yaml"
    config.write_text("audit:\n  store: postgres\n")
    line = one_line(refused_start(first, config))
    assert line.startswith("localgate: cannot start: audit.master_key_file: no audit master key")
    assert "localgate audit keygen" in line
    assert not (tmp_path / "first" / "audit-master.key").exists()

    keys = tmp_path / "keys"
    cli(first, "audit", "keygen", "--out", str(keys))
    config.write_text(
        "audit:\n  store: postgres\n"
        f"  master_key_file: {keys / 'master.key'}\n  signing_key_file: {keys / 'signing.key'}\n"
    )
    serve_one_request(first, tmp_path, config)
    # A second replica (its own data directory) with the same keys starts and writes to
    # the same log; one with a key of its own does not.
    second = environment(tmp_path / "second", upstream, LOCALGATE_AUDIT_POSTGRES_DSN=dsn)
    serve_one_request(second, tmp_path, config)
    stray = tmp_path / "stray"
    cli(second, "audit", "keygen", "--out", str(stray))
    line = one_line(
        refused_start(
            {**second, "LOCALGATE_AUDIT_MASTER_KEY": (stray / "master.key").read_text()}, config
        )
    )
    assert "is not the audit store's" in line

    verified = cli(first, "audit", "verify", "--config", str(config))
    assert "acme: OK (4 records" in verified


def test_an_unreachable_database_is_one_line(tmp_path: Path, upstream: FakeGemini) -> None:
    config = tmp_path / "postgres.yaml"
    keys = tmp_path / "keys"
    env = environment(
        tmp_path / "data",
        upstream,
        LOCALGATE_AUDIT_POSTGRES_DSN=f"postgresql://nobody@127.0.0.1:{free_port()}/none",
    )
    cli(env, "audit", "keygen", "--out", str(keys))
    config.write_text(
        "audit:\n  store: postgres\n"
        f"  master_key_file: {keys / 'master.key'}\n  signing_key_file: {keys / 'signing.key'}\n"
    )

    line = one_line(refused_start(env, config))

    assert line.startswith("localgate: cannot start: audit.store (postgres): cannot connect")
