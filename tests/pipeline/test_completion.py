"""The completion: the access-log line it assembles, and that it ends a request only once."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from localgate.errors import LocalgateError, ServiceUnavailable
from localgate.exchange.context import RequestContext
from localgate.exchange.outcome import Outcome
from localgate.exchange.principal import Principal
from localgate.observability import AccessLog, GatewayMetrics
from localgate.pipeline import Completion
from tests.pipeline.fakes import GENERATE, Audit, Completed, CountingPermit


class _BrokenAudit(Audit):
    async def record_outcome(
        self, ctx: RequestContext, outcome: Outcome, status: int, *, answer_sent: bool = False
    ) -> None:
        raise RuntimeError("a bug in the audit stage")


def finish_all(
    tmp_path: Path, ctx: RequestContext, *endings: tuple[Outcome, LocalgateError | None]
) -> tuple[list[dict[str, Any]], Audit, GatewayMetrics]:
    """End ``ctx`` once per ending given; the access-log lines, the audit stage, metrics."""
    journal: list[str] = []
    audit = Audit(journal)
    metrics = GatewayMetrics()
    access_log = AccessLog(tmp_path / "access.log")
    completion = Completion(audit, access_log, metrics)

    async def scenario() -> None:
        for outcome, error in endings:
            await completion.finish(ctx, outcome, error)
        await access_log.close()

    asyncio.run(scenario())
    lines = (tmp_path / "access.log").read_bytes().splitlines()
    return [orjson.loads(line) for line in lines], audit, metrics


def answered() -> RequestContext:
    """A request that went through every stage and got an answer from upstream."""
    ctx = RequestContext(
        request_id="r1",
        route=GENERATE,
        client="10.0.0.7",
        principal=Principal("acme", "k1"),
        cache_status="miss",
        model_version="gemini-2.5-flash-001",
        usage_metadata={
            "promptTokenCount": 8,
            "candidatesTokenCount": 5,
            "thoughtsTokenCount": 2,
            "totalTokenCount": 15,
        },
    )
    ctx.upstream, ctx.attempt = "gemini", 1
    return ctx


def test_the_access_log_line_keeps_its_format(tmp_path: Path) -> None:
    [record], _, _ = finish_all(tmp_path, answered(), (Outcome.FORWARDED, None))

    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record.pop("time"))
    assert record.pop("latency_ms") >= 0
    assert record == {
        "request_id": "r1",
        "tenant": "acme",
        "key_id": "k1",
        "client": "10.0.0.7",
        "route": "generateContent",
        "api_version": "v1beta",
        "model": "models/gemini-2.5-flash",
        "status": 200,
        "upstream": "gemini",
        "cache": "miss",
        "model_version": "gemini-2.5-flash-001",
        "usage": {
            "prompt_tokens": 8,
            "candidates_tokens": 5,
            "thoughts_tokens": 2,
            "total_tokens": 15,
        },
    }


def test_a_request_ends_once_whoever_reports_its_end(tmp_path: Path) -> None:
    ctx = answered()
    permit = CountingPermit([])
    ctx.permit = permit

    records, audit, _ = finish_all(
        tmp_path,
        ctx,
        (Outcome.UPSTREAM_ERROR, ServiceUnavailable("down")),
        (Outcome.CLIENT_DISCONNECTED, None),
        (Outcome.REFUSED, LocalgateError("later")),
    )

    assert ctx.outcome is Outcome.UPSTREAM_ERROR
    assert audit.completions == [Completed("r1", Outcome.UPSTREAM_ERROR, 503, False)]
    assert [(r["status"], r["error"]) for r in records] == [(503, "UNAVAILABLE")]
    assert permit.released == 1


def test_a_request_refused_before_admission_is_logged_not_audited(tmp_path: Path) -> None:
    ctx = RequestContext(request_id="r1", route=None)

    [record], audit, metrics = finish_all(tmp_path, ctx, (Outcome.REFUSED, LocalgateError("x")))

    assert audit.completions == []
    assert (record["route"], record["status"], record["error"]) == ("unknown", 500, "INTERNAL")
    labels = {"route": "unknown", "model": "", "status": "500"}
    assert metrics.registry.get_sample_value("localgate_requests_total", labels) == 1


def test_anonymous_requests_name_no_model_in_the_metrics(tmp_path: Path) -> None:
    ctx = RequestContext(request_id="r1", route=GENERATE)  # the key was refused

    _, _, metrics = finish_all(tmp_path, ctx, (Outcome.REFUSED, LocalgateError("x")))

    assert "gemini-2.5-flash" not in metrics.render().decode()


def test_a_defect_in_the_audit_stage_withholds_the_answer_as_an_internal_error(
    tmp_path: Path,
) -> None:
    ctx = answered()
    permit = CountingPermit([])
    ctx.permit = permit
    access_log = AccessLog(tmp_path / "access.log")
    completion = Completion(_BrokenAudit([]), access_log, GatewayMetrics())

    async def scenario() -> None:
        try:
            with pytest.raises(LocalgateError, match="request id r1") as raised:
                await completion.finish(ctx, Outcome.FORWARDED)
            assert raised.value.code == 500
        finally:
            await access_log.close()

    asyncio.run(scenario())

    assert ctx.outcome is Outcome.WITHHELD
    assert orjson.loads((tmp_path / "access.log").read_bytes())["status"] == 500
    assert permit.released == 1
