"""`localgate serve --workers 2`, as real processes: both workers answer, /metrics counts the
whole host, a worker killed with -9 comes back, SIGTERM drains streams and exits 0, SIGHUP
reloads every worker, and the audit trail verifies after traffic through both."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from localgate.cli import main
from localgate.testing import FakeGemini
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, wait_until
from tests.gateway_process import HeldStream, free_port, refuses_connections, start

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
BODY = {"contents": [{"parts": [{"text": "hi"}]}]}


@dataclass
class Workers:
    """A `localgate serve --workers 2` and what a test needs to talk to it."""

    process: subprocess.Popen[bytes]
    base: str
    port: int
    key: str
    env: dict[str, str]
    config: Path
    log: Path

    def generate(self) -> httpx.Response:
        # A new connection each time: the kernel picks the worker per connection.
        return httpx.post(
            f"{self.base}{GENERATE}",
            json=BODY,
            headers={"x-goog-api-key": self.key},
            timeout=INFRASTRUCTURE_TIMEOUT_S,
        )

    def health(self) -> dict[str, int]:
        answer = httpx.get(f"{self.base}/healthz", timeout=INFRASTRUCTURE_TIMEOUT_S).json()
        return {"worker": answer["worker"], "pid": answer["pid"]}

    def worker_pids(self) -> dict[int, int]:
        """Each worker's pid, asked until both have answered (in bursts of connections)."""
        seen: dict[int, int] = {}

        def both() -> bool:
            with ThreadPoolExecutor(8) as pool:
                for answer in pool.map(lambda _: self.health(), range(16)):
                    seen[answer["worker"]] = answer["pid"]
            return len(seen) == 2

        wait_until(both)
        return seen


def _environment(tmp_path: Path, upstream: FakeGemini) -> dict[str, str]:
    return {
        **{name: value for name, value in os.environ.items() if not name.startswith("LOCALGATE_")},
        "LOCALGATE_DATA_DIR": str(tmp_path / "data"),
        "LOCALGATE_UPSTREAM_URL": upstream.base_url,
        "GEMINI_API_KEY": "upstream-key",
    }


@contextlib.contextmanager
def _serve_workers(tmp_path: Path, upstream: FakeGemini, server: str = "") -> Iterator[Workers]:
    """A `localgate serve --workers 2`, ``server`` added to its `server:` section; it
    returns once both workers answer."""
    env = _environment(tmp_path, upstream)
    issued = CliRunner().invoke(main, ["keys", "create", "--tenant", "acme", "--json"], env=env)
    key = json.loads(issued.output)["key"]
    config = tmp_path / "localgate.yaml"
    port = free_port()
    # The port: `localgate reload` reads it to ask the gateway.
    config.write_text(f"server:\n  port: {port}\n{server}")
    log = tmp_path / "gateway.log"
    process = start(env, port, log, "--config", str(config), "--workers", "2")
    gateway = Workers(process, f"http://127.0.0.1:{port}", port, key, env, config, log)
    try:
        # `start` returns once one worker answers; a signal to a worker still starting (before
        # its handlers are installed) would end it instead of draining it.
        gateway.worker_pids()
        yield gateway
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.send_signal(signal.SIGINT)
            process.send_signal(signal.SIGINT)
            try:
                process.wait(INFRASTRUCTURE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def workers(tmp_path: Path, upstream: FakeGemini) -> Iterator[Workers]:
    with _serve_workers(tmp_path, upstream) as gateway:
        yield gateway


def _requests_total(worker: httpx.Client) -> float:
    text = worker.get("/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "localgate_requests"
        for sample in family.samples
        if sample.name == "localgate_requests_total"
    )


def _draining(worker: httpx.Client) -> bool:
    answer = worker.get("/readyz")
    return answer.status_code == 503 and answer.json()["status"] == "draining"


def test_both_workers_answer_and_metrics_count_the_whole_host(workers: Workers) -> None:
    pids = workers.worker_pids()
    assert len(set(pids.values())) == 2
    assert workers.process.pid not in pids.values()  # the supervisor serves nothing itself

    sent = 0
    with ThreadPoolExecutor(8) as pool:
        for answer in pool.map(lambda _: workers.generate(), range(60)):
            assert answer.status_code == 200, answer.text
            sent += 1

    # Whichever worker answers the scrape, it counts every worker's requests.
    clients = _client_per_worker(workers.base, workers.key)
    for client in clients.values():
        assert _requests_total(client) == sent
        client.close()


def test_a_burst_of_connections_is_shared_between_the_workers(workers: Workers) -> None:
    """A client opening its pool at once (connections queued together) gets both workers,
    not whichever accepted first: each connection stays with its worker for good."""
    connections = [
        http.client.HTTPConnection("127.0.0.1", workers.port, timeout=INFRASTRUCTURE_TIMEOUT_S)
        for _ in range(24)
    ]
    try:
        for connection in connections:
            connection.connect()
        served: Counter[int] = Counter()
        for connection in connections:
            connection.request("GET", "/healthz")
            served[json.loads(connection.getresponse().read())["worker"]] += 1
    finally:
        for connection in connections:
            connection.close()
    # Even, but for the moments a loaded machine keeps one worker from running: after
    # 50 ms the other takes a waiting connection itself (workers/balance.py). Unbalanced,
    # the worker that woke first took nearly all (58 of 64 measured).
    assert served[0] + served[1] == 24
    assert min(served[0], served[1]) >= 8, served


def test_a_worker_killed_with_9_is_started_again_and_the_gateway_keeps_answering(
    workers: Workers,
) -> None:
    before = workers.worker_pids()
    os.kill(before[0], signal.SIGKILL)
    # Meanwhile the other worker answers every request.
    for _ in range(10):
        assert workers.generate().status_code == 200

    def restarted() -> bool:
        now = workers.worker_pids()
        return now[0] != before[0] and now[1] == before[1]

    wait_until(restarted)
    assert "worker 0: died (killed by SIGKILL); starting it again" in workers.log.read_text()
    assert workers.process.poll() is None


# Longer than any test runs: the drain delay ends when the test sends a second signal, not
# when a loaded machine has let the time pass. The drain timeout, likewise, never cuts the
# stream the test holds.
_NEVER_S = INFRASTRUCTURE_TIMEOUT_S * 100


def test_sigterm_drains_every_worker_finishes_the_stream_and_exits_0(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    server = f"  drain_delay_s: {_NEVER_S:g}\n  drain_timeout_s: {_NEVER_S:g}\n"
    with _serve_workers(tmp_path, upstream, server) as workers:
        clients = _client_per_worker(workers.base, workers.key)
        with HeldStream(workers.base, workers.key, upstream) as stream:
            workers.process.send_signal(signal.SIGTERM)

            # Every worker is not ready at once (asked on a connection to each one)...
            for client in clients.values():
                wait_until(partial(_draining, client))
                client.close()
            # ... and new connections are still accepted and answered during the delay.
            assert workers.generate().status_code == 200

            # A second signal ends the delay: nobody listens from then on, not even the
            # supervisor's copy of the socket; the stream is still in flight.
            workers.process.send_signal(signal.SIGTERM)
            wait_until(lambda: refuses_connections(workers.port))
            assert workers.process.poll() is None
            stream.release()

        assert len(stream.lines) == 3
        assert workers.process.wait(timeout=INFRASTRUCTURE_TIMEOUT_S) == 0
    assert not (Path(workers.env["LOCALGATE_DATA_DIR"]) / "localgate.pid").exists()
    verified = CliRunner().invoke(main, ["audit", "verify"], env=workers.env)
    assert "acme: OK (4 records" in verified.output, verified.output


def test_after_the_drain_delay_nobody_listens_and_the_stream_still_finishes(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    # The delay passes on its own here; nothing is checked inside it.
    server = f"  drain_delay_s: 0.5\n  drain_timeout_s: {_NEVER_S:g}\n"
    with (
        _serve_workers(tmp_path, upstream, server) as workers,
        HeldStream(workers.base, workers.key, upstream) as stream,
    ):
        workers.process.send_signal(signal.SIGTERM)
        wait_until(lambda: refuses_connections(workers.port))
        assert workers.process.poll() is None
        stream.release()
        assert len(stream.lines) == 3
        assert workers.process.wait(timeout=INFRASTRUCTURE_TIMEOUT_S) == 0


def test_audit_trail_verifies_after_concurrent_traffic_through_both_workers(
    workers: Workers,
) -> None:
    workers.worker_pids()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: workers.generate(), range(40)))
    assert all(answer.status_code == 200 for answer in answers)
    workers.process.send_signal(signal.SIGINT)  # Ctrl-C: the same drain
    assert workers.process.wait(timeout=INFRASTRUCTURE_TIMEOUT_S * 2) == 0

    verified = CliRunner().invoke(main, ["audit", "verify"], env=workers.env)
    assert verified.exit_code == 0, verified.output
    assert "acme: OK (80 records" in verified.output, verified.output
    # Both workers appended to the one access log: whole lines, one per request.
    access_log = Path(workers.env["LOCALGATE_DATA_DIR"]) / "logs" / "access.log"
    lines = [json.loads(line) for line in access_log.read_text().splitlines()]
    assert sum(1 for line in lines if line.get("status") == 200) == 40


def test_sighup_reloads_every_worker(workers: Workers) -> None:
    workers.config.write_text(
        workers.config.read_text() + "proxy:\n  redaction:\n    scan_answers: false\n"
    )
    reloaded = CliRunner().invoke(
        main,
        ["reload", "--config", str(workers.config), "--timeout", str(INFRASTRUCTURE_TIMEOUT_S)],
        env=workers.env,
    )
    assert reloaded.exit_code == 0, reloaded.output
    assert "Reloaded: every worker (2) runs the file now." in reloaded.output

    versions: dict[int, int] = {}

    def readyz() -> dict[str, object]:
        answer = httpx.get(f"{workers.base}/readyz", timeout=INFRASTRUCTURE_TIMEOUT_S).json()
        return {"worker": answer["worker"], "version": answer["config"]["version"]}

    def every_worker_reloaded() -> bool:
        with ThreadPoolExecutor(8) as pool:
            for ready in pool.map(lambda _: readyz(), range(16)):
                versions[int(str(ready["worker"]))] = int(str(ready["version"]))
        return versions == {0: 2, 1: 2}

    try:
        wait_until(every_worker_reloaded)
    except AssertionError:
        raise AssertionError(
            f"configuration versions by worker: {versions}\n{workers.log.read_text()}"
        ) from None


def _client_per_worker(base: str, key: str) -> dict[int, httpx.Client]:
    """A kept-alive connection to each worker (a connection stays with the worker that
    accepted it; /healthz on it says which one that is)."""
    clients: dict[int, httpx.Client] = {}
    spare: list[httpx.Client] = []

    def one_of_each() -> bool:
        client = httpx.Client(
            base_url=base, headers={"x-goog-api-key": key}, timeout=INFRASTRUCTURE_TIMEOUT_S
        )
        index = client.get("/healthz").json()["worker"]
        if index in clients:
            spare.append(client)
        else:
            clients[index] = client
        return len(clients) == 2

    wait_until(one_of_each)
    for client in spare:
        client.close()
    return clients


def test_workers_share_one_vector_store_process_and_each_others_cache_entries(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    env = _environment(tmp_path, upstream)
    issued = CliRunner().invoke(main, ["keys", "create", "--tenant", "acme", "--json"], env=env)
    key = json.loads(issued.output)["key"]
    config = tmp_path / "localgate.yaml"
    config.write_text(f"cache:\n  enabled: true\n  timeout_s: {INFRASTRUCTURE_TIMEOUT_S:g}\n")
    port = free_port()
    log = tmp_path / "gateway.log"
    process = start(env, port, log, "--config", str(config), "--workers", "2")
    body = {
        "contents": [{"role": "user", "parts": [{"text": "Which worker answers 13812345678?"}]}],
        "generationConfig": {"temperature": 0},
    }
    try:
        clients = _client_per_worker(f"http://127.0.0.1:{port}", key)
        first = clients[0].post(GENERATE, json=body)
        assert first.status_code == 200
        assert first.headers["x-localgate-cache"] == "miss"

        # Stored by worker 0, found by worker 1: one store behind both.
        def hit_on_the_other_worker() -> bool:
            answer = clients[1].post(GENERATE, json=body)
            return answer.headers["x-localgate-cache"] == "hit; layer=exact"

        wait_until(hit_on_the_other_worker)
        for client in clients.values():
            assert client.get("/readyz").json()["checks"]["vector_store"] == "ok"
            client.close()
        assert "served to the workers at http://127.0.0.1:" in log.read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=INFRASTRUCTURE_TIMEOUT_S) == 0
    # The store process went with the gateway: the embedded store opens again.
    assert "chroma.sqlite3" in {path.name for path in (tmp_path / "data" / "chroma").iterdir()}


def test_a_key_revoked_is_refused_by_every_worker_from_its_next_request(
    workers: Workers,
) -> None:
    clients = _client_per_worker(workers.base, workers.key)
    for client in clients.values():
        assert client.post(GENERATE, json=BODY).status_code == 200
    listed = CliRunner().invoke(main, ["keys", "list", "--json"], env=workers.env)
    key_id = json.loads(listed.output.splitlines()[0])["key_id"]
    revoked = CliRunner().invoke(main, ["keys", "revoke", key_id], env=workers.env)
    assert revoked.exit_code == 0, revoked.output
    for client in clients.values():
        refused = client.post(GENERATE, json=BODY)
        assert refused.status_code in (401, 403), refused.text
        client.close()


def test_a_dead_worker_waits_for_a_valid_configuration_file_instead_of_dying_again(
    workers: Workers,
) -> None:
    good = workers.config.read_text()
    before = workers.worker_pids()
    workers.config.write_text(good + "upstream:\n  timeout_s: -1\n")  # edited, not yet fixed
    os.kill(before[0], signal.SIGKILL)

    held = "worker 0: not started again while the configuration file is invalid"
    wait_until(lambda: held in workers.log.read_text())
    assert "upstream.timeout_s" in workers.log.read_text()
    for _ in range(10):  # the other worker carries on with its configuration
        assert workers.generate().status_code == 200
    assert workers.process.poll() is None

    workers.config.write_text(good)
    wait_until(lambda: workers.worker_pids()[0] != before[0])
    assert "stopping the gateway" not in workers.log.read_text()
