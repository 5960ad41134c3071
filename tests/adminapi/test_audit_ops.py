"""Audit operations as an auditor uses them: search by each field and page through, read a
record's metadata, get a proof that checks offline, see every log's verification; and the
redaction playground giving what `localgate redact` gives."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import orjson
from click.testing import CliRunner

from localgate.admin.audit import AuditAdmin, check_proof
from localgate.admin.operators import Role
from localgate.adminapi.trail import ADMIN_LOG
from localgate.audit.checkpoint import CheckpointVerifier
from localgate.cli import main
from tests.adminapi.conftest import AdminApi
from tests.conftest import wait_until

API = "/admin/api/v1"


def search(api: AdminApi, **params: Any) -> dict[str, Any]:
    with api.client(Role.AUDITOR) as client:
        answer = client.get(f"{API}/audit/records", params=params)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_search_by_each_field(admin_api: AdminApi) -> None:
    acme = admin_api.request_ids["acme"]
    [answer] = search(admin_api, request_id=acme, kind="answer")["records"]
    header = answer["header"]
    time = datetime.fromisoformat(header["time"])
    second = timedelta(seconds=1)

    def found(**params: Any) -> set[str]:
        return {r["request_id"] for r in search(admin_api, **params)["records"]}

    assert answer["tenant"] == "acme"
    assert acme in found(tenant="acme", kind="request")
    assert acme not in found(tenant="globex")
    assert acme in found(outcome="forwarded")
    assert not found(request_id=acme, outcome="blocked by policy")
    assert found(request_id=acme, model=header["model"]) == {acme}
    assert not found(request_id=acme, model="models/other")
    assert found(request_id=acme, since=(time - second).isoformat()) == {acme}
    assert not found(request_id=acme, kind="answer", until=time.isoformat())  # exclusive
    assert not found(request_id=acme, since=(time + second).isoformat())
    assert not found(trace_id="0" * 32)


def test_search_pages_through_every_record_once(admin_api: AdminApi) -> None:
    everything = search(admin_api, limit=500)["records"]
    seen: list[tuple[str, int]] = []
    params: dict[str, Any] = {"limit": 2}
    while True:
        page = search(admin_api, **params)
        seen += [(r["tenant"], r["seq"]) for r in page["records"]]
        if page["next"] is None:
            break
        params = {"limit": 2, **page["next"]}

    assert seen == [(r["tenant"], r["seq"]) for r in everything]
    assert len(set(seen)) == len(seen)


def test_bad_search_parameters_are_refused_with_the_field_named(admin_api: AdminApi) -> None:
    with admin_api.client(Role.AUDITOR) as client:
        for params, field in (
            ({"since": "yesterday"}, "since"),
            ({"limit": "0"}, "limit"),
            ({"tenant": "../etc"}, "tenant"),
            ({"key": "lg_secret"}, "key"),
        ):
            answer = client.get(f"{API}/audit/records", params=params)
            assert answer.status_code == 400, params
            assert field in answer.json()["error"]["message"]
            assert "lg_secret" not in answer.text


def test_metadata_a_proof_that_checks_offline_and_the_verification(admin_api: AdminApi) -> None:
    request_id = admin_api.request_ids["globex"]
    audit = AuditAdmin(admin_api.settings)
    with admin_api.client(Role.AUDITOR) as client:
        # Signing is itself on record first, so the admin log is signed too.
        signed = client.post(f"{API}/audit/checkpoints").json()["signed"]
        records = client.get(f"{API}/audit/requests/{request_id}").json()["records"]
        proof = client.get(f"{API}/audit/requests/{request_id}/proof", params={"kind": "answer"})
        verification = client.get(f"{API}/audit/verify").json()
        missing = client.get(f"{API}/audit/requests/no-such-request")

    assert [r["kind"] for r in records] == ["request", "answer"]
    assert all("payload" not in r for r in records)
    assert proof.status_code == 200, proof.text
    checked = check_proof(orjson.dumps(proof.json()).decode(), audit.verifier_key())
    assert checked.valid
    assert checked.request_id == request_id
    assert checked.kind == "answer"
    assert ADMIN_LOG in {s["tenant"] for s in signed}
    assert verification["ok"] is True
    assert {"acme", "globex", ADMIN_LOG} <= {t["tenant"] for t in verification["tenants"]}
    assert missing.status_code == 404


def test_the_verifier_key_is_the_one_localgate_audit_verifier_key_prints(
    admin_api: AdminApi,
) -> None:
    with admin_api.client(Role.VIEWER) as client:
        answer = client.get(f"{API}/audit/verifier-key").json()

    expected = AuditAdmin(admin_api.settings).verifier_key()
    assert answer["verifier_key"] == expected
    assert expected.startswith(f"{answer['name']}+{answer['key_id']}+")
    assert CheckpointVerifier.from_key_string(expected).key_id == int(answer["key_id"], 16)


def test_a_background_verification_reports_progress_and_keeps_its_result(
    admin_api: AdminApi,
) -> None:
    with admin_api.client(Role.VIEWER, headers={"x-request-id": "verify-job-test"}) as client:
        before = client.get(f"{API}/audit/verify/job", params={"tenant": "globex"}).json()
        started = client.post(f"{API}/audit/verify/jobs", json={"tenant": "globex"})

        seen: list[dict[str, Any]] = []

        def finished() -> bool:
            seen.append(client.get(f"{API}/audit/verify/job", params={"tenant": "globex"}).json())
            return bool(seen[-1]["state"] != "running")

        wait_until(finished)
        done = seen[-1]
        synchronous = client.get(f"{API}/audit/verify", params={"tenant": "globex"}).json()
        other = client.get(f"{API}/audit/verify/job", params={"tenant": "acme"}).json()
        admin_trail = client.get(f"{API}/audit/verify/job").json()

    assert before["state"] == "none"
    assert started.status_code == 200, started.text
    assert started.json()["state"] in ("running", "done")
    assert started.json()["started_by"]
    assert done["state"] == "done", done
    assert done["result"] == synchronous
    records = synchronous["tenants"][0]["records"]
    assert records > 0
    assert (done["checked"], done["total"]) == (records, records)
    assert done["finished_at"] is not None
    # Each scope has its own job; none ran for these.
    assert other["state"] == "none"
    assert admin_trail["state"] == "none"
    with admin_api.client(Role.AUDITOR) as client:
        admin_log = client.get(
            f"{API}/audit/records", params={"tenant": ADMIN_LOG, "kind": "admin", "limit": 500}
        ).json()["records"]
    started_here = [
        r["header"] for r in admin_log if r["header"]["request_id"] == "verify-job-test"
    ]
    assert [(h["action"], h["target"]) for h in started_here] == [
        ("audit.verify", {"tenant": "globex"})
    ]


def test_the_playground_gives_what_localgate_redact_gives(admin_api: AdminApi) -> None:
    text = "请联系张伟，手机 13800138000，邮箱 zhang.wei@example.com"
    with admin_api.client(Role.SECURITY) as client:
        answer = client.post(f"{API}/redact", json={"text": text, "tenant": "acme"}).json()
    cli = CliRunner().invoke(
        main,
        ["redact", "--tenant", "acme", text],
        env={"LOCALGATE_DATA_DIR": str(admin_api.settings.data_dir)},
    )

    assert cli.exit_code == 0, cli.output
    assert answer["sent"] == cli.stdout.strip()
    assert {f["type"] for f in answer["findings"]} >= {"CN_MOBILE", "EMAIL"}
    assert "13800138000" not in answer["sent"]
    assert all(f["action"] == "pseudonymize" for f in answer["findings"])
