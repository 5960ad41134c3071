"""Merging several workers' metrics into the host's: sums, maxima, minima, and siblings
that are gone or stuck."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.parser import text_string_to_metric_families

from localgate.observability import GatewayMetrics
from localgate.observability.host import HostMetrics
from localgate.observability.siblings import Siblings, socket_path


def _values(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
    }


class _Host:
    """One worker's metrics with the socket its siblings ask."""

    def __init__(self, registry: CollectorRegistry, directory: Path, index: int) -> None:
        self.siblings = Siblings(directory, index)
        self.metrics = HostMetrics(registry, self.siblings)

    async def start(self) -> None:
        await self.siblings.start()

    async def close(self) -> None:
        await self.siblings.close()

    async def render(self) -> bytes:
        return await self.metrics.render()


def _worker(directory: Path, index: int) -> tuple[GatewayMetrics, _Host]:
    metrics = GatewayMetrics()
    return metrics, _Host(metrics.registry, directory, index)


def test_the_scraped_worker_reports_every_workers_requests(tmp_path: Path) -> None:
    async def scenario() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        workers = [_worker(tmp_path, index) for index in range(3)]
        for _, host in workers:
            await host.start()
        for count, (metrics, _) in enumerate(workers, start=1):
            for _ in range(count):
                metrics.observe("generateContent", "gemini-2.5-flash", 200, 0.02)
        workers[1][0].observe("generateContent", "gemini-2.5-flash", 429, 3.0)
        workers[0][0].in_flight = 2
        workers[2][0].in_flight = 5
        text = await workers[1][1].render()
        for _, host in workers:
            await host.close()
        return _values(text)

    values = asyncio.run(scenario())
    ok = (("model", "gemini-2.5-flash"), ("route", "generateContent"), ("status", "200"))
    refused = (("model", "gemini-2.5-flash"), ("route", "generateContent"), ("status", "429"))
    assert values[("localgate_requests_total", ok)] == 6  # 1 + 2 + 3
    assert values[("localgate_requests_total", refused)] == 1
    bucket = tuple(sorted((*ok, ("le", "0.025"))))
    assert values[("localgate_request_duration_seconds_bucket", bucket)] == 6
    assert values[("localgate_request_duration_seconds_count", refused)] == 1
    assert values[("localgate_request_duration_seconds_sum", refused)] == 3.0
    assert values[("localgate_requests_in_flight", ())] == 7


def test_gauges_that_are_not_amounts_take_the_worst_or_latest(tmp_path: Path) -> None:
    async def scenario() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        (first, first_host), (second, second_host) = (_worker(tmp_path, i) for i in range(2))
        first.audit_checkpoint_success.set(1000)
        second.audit_checkpoint_success.set(0)  # not the signer
        first.config_last_reload_successful.set(1)
        second.config_last_reload_successful.set(0)
        first.upstream_circuit_state.labels("gemini").set(0)
        second.upstream_circuit_state.labels("gemini").set(2)
        first.config_info.labels("abc", "2").set(1)
        second.config_info.labels("abc", "2").set(1)
        await first_host.start()
        await second_host.start()
        text = await first_host.render()
        await first_host.close()
        await second_host.close()
        return _values(text)

    values = asyncio.run(scenario())
    assert values[("localgate_audit_checkpoint_last_success_timestamp_seconds", ())] == 1000
    assert values[("localgate_config_last_reload_successful", ())] == 0
    assert values[("localgate_upstream_circuit_state", (("upstream", "gemini"),))] == 2
    assert values[("localgate_config_info", (("hash", "abc"), ("version", "2")))] == 1


def test_created_timestamps_are_the_earliest_not_a_sum(tmp_path: Path) -> None:
    async def scenario() -> bytes:
        hosts = []
        for index in range(2):
            registry = CollectorRegistry()
            Counter("localgate_things", "Things.", registry=registry).inc()
            hosts.append(_Host(registry, tmp_path, index))
        for host in hosts:
            await host.start()
        text = await hosts[0].render()
        for host in hosts:
            await host.close()
        return text

    values = _values(asyncio.run(scenario()))
    assert values[("localgate_things_total", ())] == 2
    created = values[("localgate_things_created", ())]
    assert 1e9 < created < 1e10  # a time, not two times added


def test_a_dead_or_stuck_sibling_is_left_out_and_the_scrape_still_answers(
    tmp_path: Path,
) -> None:
    async def scenario() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        metrics, host = _worker(tmp_path, 0)
        metrics.observe("generateContent", None, 200, 0.01)
        await host.start()
        # A worker killed with -9 leaves its socket file behind, with nobody listening.
        stale = socket_path(tmp_path, 1)
        server = await asyncio.start_unix_server(lambda r, w: None, path=str(stale))
        server.close()
        await server.wait_closed()
        stale.touch(exist_ok=True)
        # One that accepts and never answers.
        registry = CollectorRegistry()
        Gauge("localgate_requests_in_flight", "x", registry=registry).set(100)
        held: list[asyncio.StreamWriter] = []

        async def stuck(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)  # accepted, never answered

        hung = await asyncio.start_unix_server(stuck, path=str(socket_path(tmp_path, 2)))
        text = await host.render()
        for writer in held:
            writer.close()
            await writer.wait_closed()
        hung.close()
        await hung.wait_closed()
        await host.close()
        return _values(text)

    values = asyncio.run(scenario())
    only = (("model", ""), ("route", "generateContent"), ("status", "200"))
    assert values[("localgate_requests_total", only)] == 1
    assert values[("localgate_requests_in_flight", ())] == 0
