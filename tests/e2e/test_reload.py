"""Hot reload end to end: a real ``localgate serve`` process, its configuration file changed
under it, reloaded with ``localgate reload`` and with SIGHUP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from localgate.cli import main
from localgate.testing import FakeGemini
from tests.conftest import INFRASTRUCTURE_TIMEOUT_S, wait_until
from tests.gateway_process import free_port, start

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
BADGE = "Badge EMP-123456 was lost at the front desk"
RULE = """proxy:
  redaction_rules:
    - pattern: 'EMP-[0-9]{6}'
      type: EMPLOYEE_ID
      action: pseudonymize
"""


class Gateway:
    """A ``localgate serve`` process, the file it was started with, and a tenant key."""

    def __init__(self, tmp_path: Path, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch):
        self.config = tmp_path / "localgate.yaml"
        self.port = free_port()
        self.log = tmp_path / "gateway.log"
        self.write("")
        data = self.data = tmp_path / "data"
        self.env = {
            **os.environ,
            "LOCALGATE_DATA_DIR": str(data),
            "LOCALGATE_UPSTREAM_URL": upstream.base_url,
            "GEMINI_API_KEY": "upstream-key",
        }
        self.env.pop("LOCALGATE_CONFIG", None)
        for name in ("LOCALGATE_DATA_DIR", "LOCALGATE_UPSTREAM_URL", "GEMINI_API_KEY"):
            monkeypatch.setenv(name, self.env[name])
        issued = self.cli("keys", "create", "--tenant", "acme", "--json")
        self.key = json.loads(issued.output)["key"]
        self.process: subprocess.Popen[bytes] | None = None

    def write(self, extra: str) -> None:
        """The configuration file: the port, generous timeouts, and ``extra``."""
        self.config.write_text(
            f"server:\n  port: {self.port}\n"
            f"upstream:\n  connect_timeout_s: {INFRASTRUCTURE_TIMEOUT_S}\n{extra}"
        )

    def cli(self, *arguments: str) -> Any:
        return CliRunner().invoke(main, [*arguments, "--config", str(self.config)])

    def reload(self) -> Any:
        return self.cli("reload", "--timeout", str(INFRASTRUCTURE_TIMEOUT_S))

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}",
            headers={"x-goog-api-key": self.key},
            timeout=INFRASTRUCTURE_TIMEOUT_S,
        )

    def readyz(self) -> dict[str, Any]:
        response = httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=5)
        body: dict[str, Any] = response.json()
        return body

    def access_records(self, count: int) -> list[dict[str, Any]]:
        """The model requests' access-log lines, once ``count`` are written (in batches)."""
        path = self.data / "logs" / "access.log"

        def lines() -> list[dict[str, Any]]:
            text = path.read_text() if path.exists() else ""
            return [json.loads(line) for line in text.splitlines()]

        wait_until(lambda: len(lines()) >= count)
        return lines()

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text


@pytest.fixture
def gateway(
    tmp_path: Path, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Gateway]:
    running = Gateway(tmp_path, upstream, monkeypatch)
    running.process = start(running.env, running.port, running.log, "--config", str(running.config))
    try:
        yield running
    finally:
        running.process.send_signal(signal.SIGTERM)
        running.process.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)


def sent_upstream(upstream: FakeGemini) -> str:
    body = upstream.requests[-1].body
    return str(body["contents"][-1]["parts"][0]["text"])


def ask(client: httpx.Client, text: str) -> httpx.Response:
    response = client.post(GENERATE, json={"contents": [{"parts": [{"text": text}]}]})
    assert response.status_code == 200, response.text
    return response


def test_a_rule_added_applies_to_the_next_request_and_a_broken_file_changes_nothing(
    gateway: Gateway, upstream: FakeGemini
) -> None:
    with gateway.client() as client:
        ask(client, BADGE)
        assert "EMP-123456" in sent_upstream(upstream)  # no rule for it yet

        # A rule added, and a setting that only a restart applies.
        gateway.write(RULE + "  redaction:\n    scan_answers: false\nlogging:\n  level: debug\n")
        reloaded = gateway.reload()
        assert reloaded.exit_code == 0, reloaded.output
        assert "Reloaded: running configuration version 2" in reloaded.output
        assert "logging.level: changed; takes effect after a restart" in reloaded.output

        answer = ask(client, BADGE)
        assert "EMP-123456" not in sent_upstream(upstream)
        assert "[EMPLOYEE_ID_1]" in sent_upstream(upstream)
        assert "EMP-123456" in answer.text  # the placeholder the model echoed, restored

        # A rule RE2 cannot run in linear time. `localgate reload` checks the file with
        # the gateway's validator and does not send it; SIGHUP makes the gateway read it,
        # and reject it.
        gateway.write(RULE.replace("'EMP-[0-9]{6}'", "'(?<=EMP)-[0-9]{6}'"))
        refused = gateway.reload()
        assert refused.exit_code == 1
        assert "proxy.redaction_rules.0.pattern: not a valid RE2 pattern" in refused.output
        assert "The gateway was not asked to reload" in refused.output
        assert gateway.readyz()["config"]["reloads"] == 1
        assert gateway.process is not None
        gateway.process.send_signal(signal.SIGHUP)
        wait_until(lambda: gateway.readyz()["config"]["reloads"] == 2)
        assert "proxy.redaction_rules.0.pattern" in gateway.log.read_text()

        ask(client, BADGE)
        assert "[EMPLOYEE_ID_1]" in sent_upstream(upstream)
        ready = gateway.readyz()
        assert ready["status"] == "ready"  # still serving its last good configuration
        assert ready["checks"]["config"].startswith("last reload rejected (1 problem(s))")
        assert ready["config"]["version"] == 2
        metrics = gateway.metrics()
        assert "localgate_config_last_reload_successful 0.0" in metrics
        assert 'localgate_config_reloads_total{result="rejected"} 1.0' in metrics
        assert f'localgate_config_info{{hash="{ready["config"]["hash"]}",version="2"}} 1.0' in (
            metrics
        )

        # Back to no rule.
        gateway.write("")
        reloaded = gateway.reload()
        assert reloaded.exit_code == 0, reloaded.output
        assert gateway.readyz()["config"]["version"] == 3
        ask(client, BADGE)
        assert "EMP-123456" in sent_upstream(upstream)
        assert gateway.readyz()["checks"]["config"] == "ok"
        assert "localgate_config_last_reload_successful 1.0" in gateway.metrics()


def test_a_stream_in_flight_across_a_reload_finishes_on_the_policy_it_started_with(
    gateway: Gateway, upstream: FakeGemini
) -> None:
    gateway.write(RULE)
    assert gateway.reload().exit_code == 0
    started_under = gateway.readyz()["config"]["hash"]
    hold = threading.Event()
    upstream.echo_stream(8)  # the (redacted) question comes back, 8 characters an event
    upstream.stream([], hold=hold)  # the first event, then nothing until `hold` is set
    events: list[str] = []
    first = threading.Event()

    def read_stream() -> None:
        with (
            gateway.client() as client,
            client.stream(
                "POST", STREAM, json={"contents": [{"parts": [{"text": BADGE}]}]}
            ) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(line)
                    first.set()

    reader = threading.Thread(target=read_stream)
    reader.start()
    try:
        assert first.wait(INFRASTRUCTURE_TIMEOUT_S)
        assert "[EMPLOYEE_ID_1]" in sent_upstream(upstream)
        # The rule goes away while the stream is held in the middle of the placeholder.
        gateway.write("")
        assert gateway.reload().exit_code == 0
    finally:
        hold.set()
        reader.join(INFRASTRUCTURE_TIMEOUT_S)
    streamed = "".join(
        part.get("text", "")
        for line in events
        for candidate in json.loads(line[6:]).get("candidates", [])
        for part in candidate["content"]["parts"]
    )
    assert streamed == BADGE  # restored with the request's own table, policy version 2

    upstream.reset()
    with gateway.client() as client:
        after = ask(client, BADGE)
    assert "EMP-123456" in sent_upstream(upstream)  # the next request runs version 3
    # The access log ties each request to the configuration it ran under.
    now_running = gateway.readyz()["config"]["hash"]
    assert now_running != started_under
    records = gateway.access_records(2)
    assert [record["config"] for record in records] == [started_under, now_running]
    assert records[1]["request_id"] == after.headers["x-request-id"]


def test_the_pid_file_goes_when_the_gateway_stops(
    tmp_path: Path, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = Gateway(tmp_path, upstream, monkeypatch)
    process = start(running.env, running.port, running.log, "--config", str(running.config))
    pid_file = running.data / "localgate.pid"
    assert pid_file.read_text().strip() == str(process.pid)

    process.send_signal(signal.SIGTERM)
    process.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)

    assert not pid_file.exists()
    gone = running.reload()
    assert gone.exit_code == 2
    assert "no running gateway found" in gone.output


def test_a_stale_pid_file_naming_another_program_is_not_signalled(
    tmp_path: Path, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = Gateway(tmp_path, upstream, monkeypatch)
    # A gateway that was killed left its pid file; the pid now belongs to another program.
    other = subprocess.Popen(["sleep", "600"])  # noqa: S607 - a fixed, harmless program
    try:
        running.data.mkdir(parents=True, exist_ok=True)
        (running.data / "localgate.pid").write_text(f"{other.pid}\n")

        refused = running.reload()

        assert refused.exit_code == 2
        assert "not a localgate gateway" in refused.output
        assert other.poll() is None  # not sent SIGHUP, which would have ended it
    finally:
        other.kill()
        other.wait(timeout=INFRASTRUCTURE_TIMEOUT_S)


def test_limits_changed_by_a_reload_apply_to_the_next_request(
    gateway: Gateway, upstream: FakeGemini
) -> None:
    limited = "tenants:\n  acme:\n    limits:\n      requests_per_minute: {}\n"
    with gateway.client() as client:
        gateway.write(limited.format(1))
        assert gateway.reload().exit_code == 0
        assert ask(client, "one").headers["x-ratelimit-remaining-requests"] == "0"
        assert (
            client.post(GENERATE, json={"contents": [{"parts": [{"text": "two"}]}]}).status_code
            == 429
        )

        # Raised: the count of the window already open carries on.
        gateway.write(limited.format(5))
        assert gateway.reload().exit_code == 0
        assert ask(client, "three").headers["x-ratelimit-remaining-requests"] == "3"

        gateway.write("limits:\n  backend: redis\n  redis_url: redis://127.0.0.1:1/0\n")
        reloaded = gateway.reload()
        assert "limits.backend: changed; takes effect after a restart" in reloaded.output
        assert "x-ratelimit-limit-requests" not in ask(client, "four").headers
