"""Two gateway replicas behind one name, as a platform team runs them: one PostgreSQL
(database_url: keys, audit trail, fingerprints), one Redis (limits), one Chroma server
(cache). Real `localgate serve` processes.

They behave as one gateway: traffic through both lands in one verified audit log per
tenant, also after one of them is killed with SIGKILL mid-traffic (the other takes over
signing); a key revoked through the shared store is refused by both within the promised
second; an answer cached by one is a hit on the other; a replica given another master,
signing or seal key refuses to start, in one line.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest

from localgate.testing import FakeGemini
from tests.audit.conftest import postgres_schema
from tests.audit.test_replica_keys import cli, one_line, refused_start
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, wait_until
from tests.gateway_process import free_port, start
from tests.limits.conftest import REDIS_URL, redis_available

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
# The promise is one second; the rest is for a loaded test machine.
REVOCATION_DEADLINE_S = 1.0 + 4.0
SIGNER = "this process is the checkpoint signer now"


@dataclass
class Deployment:
    """The shared pieces, and the replicas started on them."""

    tmp: Path
    env: dict[str, str]
    config: Path
    keys: Path
    tenant: str
    replicas: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)

    def start(self, name: str) -> None:
        port = free_port()
        env = {**self.env, "LOCALGATE_DATA_DIR": str(self.tmp / name)}
        self.replicas[name] = start(env, port, self.log(name), "--config", str(self.config))
        self.urls[name] = f"http://127.0.0.1:{port}"

    def log(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def cli(self, *arguments: str) -> str:
        return cli(self.env, *arguments, "--config", str(self.config))

    def new_key(self) -> str:
        created = json.loads(self.cli("keys", "create", "--tenant", self.tenant, "--json"))
        return str(created["key"])

    def post(self, name: str, key: str, text: str) -> httpx.Response:
        return httpx.post(
            self.urls[name] + GENERATE,
            json={
                "contents": [{"role": "user", "parts": [{"text": text}]}],
                "generationConfig": {"temperature": 0},
            },
            headers={"x-goog-api-key": key},
            timeout=INFRASTRUCTURE_TIMEOUT_S,
        )


@pytest.fixture
def deployment(tmp_path: Path, upstream: FakeGemini, chroma_server: str) -> Iterator[Deployment]:
    redis_available()
    tenant = f"t{secrets.token_hex(6)}"
    with postgres_schema() as dsn:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LOCALGATE_")},
            "LOCALGATE_DATABASE_URL": dsn,
            "LOCALGATE_UPSTREAM_URL": upstream.base_url,
            "GEMINI_API_KEY": "upstream-key",
            "LOCALGATE_DATA_DIR": str(tmp_path / "cli"),
        }
        keys = tmp_path / "keys"
        cli(env, "audit", "keygen", "--out", str(keys))
        config = tmp_path / "replica.yaml"
        config.write_text(
            f"""
audit:
  master_key_file: {keys / "master.key"}
  signing_key_file: {keys / "signing.key"}
  checkpoint_interval_s: 0.5
proxy:
  signature_key_file: {keys / "seal.key"}
limits:
  backend: redis
  redis_url: {REDIS_URL}
cache:
  enabled: true
  chroma_url: {chroma_server}
  timeout_s: {INFRASTRUCTURE_TIMEOUT_S}
"""
        )
        built = Deployment(tmp_path, env, config, keys, tenant)
        try:
            yield built
        finally:
            for process in built.replicas.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in built.replicas.values():
                process.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)
            _forget(tenant)


def _forget(tenant: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    found = list(client.scan_iter(f"localgate:limits:tenant:{tenant}*"))
    if found:
        client.delete(*found)
    client.close()


def verified(deployment: Deployment) -> str:
    output = deployment.cli("audit", "verify")
    assert f"{deployment.tenant}: OK" in output, output
    assert "FAILED" not in output, output
    assert "foreign" not in output, output
    return output


def test_two_replicas_on_one_database_behave_as_one_gateway(deployment: Deployment) -> None:
    key = deployment.new_key()  # made before either replica runs: both read it from PostgreSQL
    deployment.start("one")
    deployment.start("two")

    # Traffic through both, at once.
    answers: list[int] = []

    def send(name: str, count: int) -> None:
        for n in range(count):
            answers.append(deployment.post(name, key, f"load {name} {n}").status_code)

    senders = [threading.Thread(target=send, args=(name, 15)) for name in ("one", "two") * 2]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    assert answers == [200] * 60

    # An answer cached by one is a hit on the other.
    first = deployment.post("one", key, "Which replica answers 13812345678?")
    assert first.headers["x-localgate-cache"] == "miss"
    wait_until(
        lambda: (
            deployment.post("two", key, "Which replica answers 13812345678?").headers[
                "x-localgate-cache"
            ]
            == "hit; layer=exact"
        )
    )

    # A key revoked through the shared store is refused by both within the second.
    doomed = deployment.new_key()
    assert deployment.post("two", doomed, "before").status_code == 200  # cached on two
    assert deployment.post("one", doomed, "before").status_code == 200
    key_id = doomed.split("_")[1]
    deployment.cli("keys", "revoke", key_id)

    def refused_by_both() -> bool:
        return all(
            deployment.post(name, doomed, "after").status_code == 403 for name in ("one", "two")
        )

    wait_until(refused_by_both, timeout=REVOCATION_DEADLINE_S)
    assert deployment.post("one", key, "still fine").status_code == 200

    # One signer between them.
    wait_until(
        lambda: SIGNER in deployment.log("one").read_text() + deployment.log("two").read_text()
    )
    signers = [name for name in ("one", "two") if SIGNER in deployment.log(name).read_text()]
    assert len(signers) == 1, signers
    verified(deployment)

    # The signer is killed mid-traffic; the other goes on, takes over signing, and the log
    # verifies: no fork, no lost record that was answered.
    (signer,) = signers
    survivor = "two" if signer == "one" else "one"
    stop = threading.Event()
    survivor_answers: list[int] = []

    def keep_sending(name: str, into: list[int]) -> None:
        n = 0
        while not stop.is_set():
            try:
                into.append(deployment.post(name, key, f"kill {name} {n}").status_code)
            except httpx.TransportError:
                into.append(0)  # the killed replica
            n += 1

    killed_answers: list[int] = []
    traffic = [
        threading.Thread(target=keep_sending, args=(signer, killed_answers)),
        threading.Thread(target=keep_sending, args=(survivor, survivor_answers)),
    ]
    for thread in traffic:
        thread.start()
    wait_until(lambda: len(killed_answers) >= 5 and len(survivor_answers) >= 5)
    deployment.replicas[signer].send_signal(signal.SIGKILL)
    deployment.replicas[signer].wait(timeout=INFRASTRUCTURE_TIMEOUT_S)
    seen = len(survivor_answers)
    wait_until(lambda: len(survivor_answers) >= seen + 10)
    stop.set()
    for thread in traffic:
        thread.join()
    assert set(survivor_answers) == {200}
    wait_until(lambda: SIGNER in deployment.log(survivor).read_text())
    verified(deployment)
    # The survivor signs the head, which includes the killed replica's last records.
    wait_until(lambda: _signed_head(deployment) == _head(deployment))

    # Replicas given other keys refuse to start, one line each.
    other = deployment.tmp / "other-keys"
    cli(deployment.env, "audit", "keygen", "--out", str(other))
    env = {**deployment.env, "LOCALGATE_DATA_DIR": str(deployment.tmp / "stray")}
    for wrong, setting in (
        ("master_key_file", "audit.master_key_file"),
        ("signing_key_file", "audit.signing_key_file"),
        ("signature_key_file", "proxy.signature_key_file"),
    ):
        config = deployment.tmp / f"wrong-{wrong}.yaml"
        name = {"master_key_file": "master.key", "signing_key_file": "signing.key"}.get(
            wrong, "seal.key"
        )
        config.write_text(
            deployment.config.read_text().replace(str(deployment.keys / name), str(other / name))
        )
        line = one_line(refused_start(env, config))
        assert line.startswith(f"localgate: cannot start: {setting}"), line
    verified(deployment)


def _head(deployment: Deployment) -> int:
    with psycopg.connect(deployment.env["LOCALGATE_DATABASE_URL"]) as db:
        row = db.execute(
            "SELECT size FROM audit_frontier WHERE tenant = %s", (deployment.tenant,)
        ).fetchone()
    return int(row[0]) if row else 0


def _signed_head(deployment: Deployment) -> int:
    with psycopg.connect(deployment.env["LOCALGATE_DATABASE_URL"]) as db:
        row = db.execute(
            "SELECT max(size) FROM audit_checkpoints WHERE tenant = %s", (deployment.tenant,)
        ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0
