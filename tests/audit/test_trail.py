"""The audit trail as auditors and operators use it: through the gateway and the CLI."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from localgate.audit.store import AuditStore
from localgate.cli import main
from localgate.testing import FakeGemini
from tests.conftest import RunningGateway, run_gateway

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
PROMPT = "客户张伟，手机13812345678，请起草一封道歉信"


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("LOCALGATE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("LOCALGATE_CONFIG", raising=False)
    monkeypatch.delenv("LOCALGATE_AUDIT_MASTER_KEY", raising=False)
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(main, ["audit", *args])

    return run


def send(gateway: RunningGateway, body: dict[str, Any], path: str = GENERATE, **kw: Any) -> str:
    with gateway.client() as http:
        response = http.post(path, json=body, headers={"x-goog-api-key": gateway.key, **kw})
    return str(response.headers["x-request-id"])


# Every decryption states why (it is recorded in the admin-action trail).
DECRYPT = ("--decrypt", "--reason", "test: read the stored payload")


def records(cli: Any, request_id: str, *flags: str) -> list[dict[str, Any]]:
    result = cli("show", "--request-id", request_id, *flags)
    assert result.exit_code == 0, result.output
    return [
        json.loads(chunk)
        for chunk in result.output.split("\n}\n")
        if chunk.strip()
        for chunk in [chunk + "}"]
    ]


def test_every_request_is_on_record_redacted_and_verifiable(
    tmp_path: Path, upstream: FakeGemini, cli: Any
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        first = send(
            gateway, {"contents": [{"parts": [{"text": PROMPT}]}]}, **{"x-localgate-user": "u-42"}
        )
        upstream.stream(["a", "b"])
        second = send(gateway, {"contents": [{"parts": [{"text": "hi"}]}]}, STREAM)
        blocked = send(
            gateway,
            {"contents": [{"parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}]},
        )

    request, answer = records(cli, first, *DECRYPT)
    header = request["header"]
    assert header["kind"] == "request"
    assert header["tenant"] == "acme"
    assert header["key_id"] == gateway.key_id
    assert header["redaction"] == {"CN_MOBILE": {"pseudonymize": 1}, "PERSON": {"pseudonymize": 1}}
    assert len(header["prompt_hmac"]) == 64
    assert len(header["user_hmac"]) == 64
    assert "13812345678" not in json.dumps(header, ensure_ascii=False)
    sent = request["payload"]["contents"][0]["parts"][0]["text"]
    assert sent == "客户[PERSON_1]，手机[CN_MOBILE_1]，请起草一封道歉信"
    assert answer["header"]["outcome"] == "forwarded"
    assert answer["header"]["status"] == 200
    assert answer["header"]["usage"]["total"] == 13
    assert "13812345678" not in json.dumps(answer, ensure_ascii=False)
    streamed = records(cli, second)[1]["header"]
    assert (streamed["outcome"], streamed["route"]) == ("forwarded", "streamGenerateContent")
    (refused,) = records(cli, blocked)
    assert (refused["header"]["outcome"], refused["header"]["status"]) == ("blocked by policy", 400)

    verified = cli("verify")
    assert verified.exit_code == 0, verified.output
    assert "acme: OK (5 records, 1 checkpoints)" in verified.output
    found = cli("find-prompt", "--tenant", "acme", PROMPT, "--reason", "test: was it sent?")
    assert first in found.output


def test_audit_failure_refuses_the_request(
    gateway: RunningGateway, upstream: FakeGemini, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> object:
        raise OSError("disk full")

    monkeypatch.setattr(AuditStore, "_append", broken)

    with gateway.client() as http:
        response = http.post(
            GENERATE,
            json={"contents": [{"parts": [{"text": "hi"}]}]},
            headers={"x-goog-api-key": gateway.key},
        )

    assert response.status_code == 503
    assert "audit record could not be written" in response.json()["error"]["message"]
    assert upstream.requests == []


def test_proof_checks_offline_with_only_the_public_key(
    tmp_path: Path, upstream: FakeGemini, cli: Any
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        request_id = send(gateway, {"contents": [{"parts": [{"text": "hi"}]}]})
    key = cli("verifier-key").output.strip()

    proof = cli("prove", "--request-id", request_id)
    assert proof.exit_code == 0, proof.output
    proof_file = tmp_path / "proof.json"
    proof_file.write_text(proof.output)
    checked = CliRunner().invoke(main, ["audit", "check-proof", str(proof_file), "--key", key])
    tampered = json.loads(proof.output)
    tampered["seq"] += 1
    proof_file.write_text(json.dumps(tampered))
    refused = CliRunner().invoke(main, ["audit", "check-proof", str(proof_file), "--key", key])

    assert checked.exit_code == 0, checked.output
    assert checked.output.startswith(f"OK: request record 0 of tenant acme (request {request_id}")
    assert refused.exit_code == 1
    assert "INVALID" in refused.output


def test_a_tampered_proof_bundle_fails_in_the_cli(
    tmp_path: Path, upstream: FakeGemini, cli: Any
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        request_id = send(gateway, {"contents": [{"parts": [{"text": "hi"}]}]})
    assert cli("checkpoint").exit_code == 0
    key = cli("verifier-key").output.strip()
    bundle = json.loads(cli("prove", "--request-id", request_id).output)
    payload = bytearray(base64.b64decode(bundle["ciphertexts"]["payload"]))
    payload[-1] ^= 1
    tampered = {
        "ciphertext": {**bundle, "ciphertexts": {"payload": base64.b64encode(payload).decode()}},
        "origin": {**bundle, "origin": "elsewhere/audit/acme"},
        "size": {**bundle, "tree_size": bundle["tree_size"] + 1},
    }

    outputs = {}
    for name, content in {"intact": bundle, **tampered}.items():
        bundle_file = tmp_path / f"{name}.json"
        bundle_file.write_text(json.dumps(content))
        result = CliRunner().invoke(main, ["audit", "check-proof", str(bundle_file), "--key", key])
        outputs[name] = (result.exit_code, result.output)

    assert outputs["intact"][0] == 0, outputs["intact"]
    assert outputs["ciphertext"] == (
        1,
        "INVALID: the payload ciphertext is not the one the record's header fixed\n",
    )
    assert outputs["origin"][0] == 1
    assert "names the log 'elsewhere/audit/acme'" in outputs["origin"][1]
    assert outputs["size"][0] == 1
    assert "tree size" in outputs["size"][1]


def test_crypto_shredding_keeps_the_log_verifiable(
    tmp_path: Path, upstream: FakeGemini, cli: Any
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        request_id = send(gateway, {"contents": [{"parts": [{"text": PROMPT}]}]})
    assert "payload" in records(cli, request_id, *DECRYPT)[0]

    shredded = cli("shred", "--now", "2031-01-01T00:00:00")
    after = records(cli, request_id, *DECRYPT)[0]
    verified = cli("verify")

    assert shredded.output.startswith(
        "destroyed 1 data key"
    )  # the tenant's payload key of that day
    assert "destroyed by retention" in after["payload"]["unavailable"]
    assert verified.exit_code == 0, verified.output


def test_master_key_rotation_rewraps_without_rewriting_records(
    tmp_path: Path, upstream: FakeGemini, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        request_id = send(gateway, {"contents": [{"parts": [{"text": "hi"}]}]})
    new_key = tmp_path / "new-master.key"

    rotated = cli("rotate-key", "--new-key-file", str(new_key))
    monkeypatch.setenv("LOCALGATE_AUDIT_MASTER_KEY", new_key.read_text().strip())
    after = records(cli, request_id, *DECRYPT)[0]

    assert rotated.exit_code == 0, rotated.output
    assert after["payload"]["contents"][0]["parts"][0]["text"] == "hi"
    assert cli("verify").exit_code == 0


def test_exported_checkpoints_catch_a_rewritten_database(
    tmp_path: Path, upstream: FakeGemini, cli: Any
) -> None:
    config = f"audit:\n  checkpoint_export_dir: {tmp_path / 'worm'}\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        send(gateway, {"contents": [{"parts": [{"text": "hi"}]}]})
    # The DBA deletes every checkpoint from the database...
    import sqlite3

    with sqlite3.connect(tmp_path / "data" / "audit.db") as db:
        db.execute("DELETE FROM audit_checkpoints")
        db.execute("DELETE FROM audit_log WHERE seq = 1")
        db.execute("UPDATE audit_frontier SET size = 1")

    alone = cli("verify")
    with_export = cli("verify", "--checkpoints", str(tmp_path / "worm"))

    # The writer's stored head still counts the deleted record.
    assert alone.exit_code == 1
    assert "acme: FAILED: record 1: deleted: the gateway wrote 2 records" in alone.output
    assert with_export.exit_code == 1
    assert "truncated" in with_export.output

    with sqlite3.connect(tmp_path / "data" / "audit.db") as db:
        db.execute("DELETE FROM audit_log")  # the whole tenant, gone
        db.execute("DELETE FROM audit_frontier")
    vanished = cli("verify", "--checkpoints", str(tmp_path / "worm"))

    assert vanished.exit_code == 1
    assert "acme: FAILED: the log: deleted: the whole log is missing" in vanished.output


def test_original_prompts_are_kept_only_for_their_short_window(
    tmp_path: Path, upstream: FakeGemini, cli: Any
) -> None:
    from datetime import UTC, datetime, timedelta

    config = "audit:\n  store_original_prompt: true\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        request_id = send(gateway, {"contents": [{"parts": [{"text": PROMPT}]}]})
    before = records(cli, request_id, *DECRYPT)[0]
    later = (datetime.now(UTC) + timedelta(hours=74)).replace(tzinfo=None).isoformat()

    cli("shred", "--now", later)
    after = records(cli, request_id, *DECRYPT)[0]

    assert before["original_prompt"] == [PROMPT]
    assert "destroyed by retention" in after["original_prompt"]["unavailable"]
    assert "[CN_MOBILE_1]" in json.dumps(after["payload"], ensure_ascii=False)


def test_metadata_purge_leaves_a_signed_marker_and_a_verifiable_log(
    tmp_path: Path, upstream: FakeGemini, cli: Any
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        first = send(gateway, {"contents": [{"parts": [{"text": PROMPT}]}]})
    four_years = "2030-12-01T00:00:00"

    purged = cli("purge", "--now", four_years)
    verified = cli("verify")
    after = cli("show", "--request-id", first)

    assert purged.exit_code == 0, purged.output
    assert "acme: metadata of records 0..1 purged" in purged.output
    assert verified.exit_code == 0, verified.output
    assert "acme: OK (3 records" in verified.output
    assert '"header": {}' in after.output  # nothing left but the leaf hash

    import sqlite3

    with sqlite3.connect(tmp_path / "data" / "audit.db") as db:
        db.execute("UPDATE audit_log SET header = NULL WHERE seq = 2")  # the marker itself
    # Without its signed marker, the erasure of records 0-1 is no longer legitimate.
    assert "record 0: modified: the header was removed" in cli("verify").output


def test_the_checkpoint_gauge_says_when_signing_last_caught_up(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    before = time.time()
    with run_gateway(tmp_path / "data", upstream.base_url) as gateway:
        send(gateway, {"contents": [{"parts": [{"text": "hi"}]}]})
        with gateway.client() as client:
            text = client.get("/metrics").text

    (line,) = [
        line
        for line in text.splitlines()
        if line.startswith("localgate_audit_checkpoint_last_success_timestamp_seconds ")
    ]
    # Set when the trail started (the first signing round is a minute later): an alert on
    # its age then counts from the start, not from 1970.
    assert float(line.split()[1]) >= before
