"""The pipeline tests' gateways, their access logs closed after each test."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.fakes import Gateway, MakeGateway
from tests.upstream.fakes import ScriptedUpstream


@pytest.fixture
def make_gateway(tmp_path: Path) -> Iterator[MakeGateway]:
    """``make_gateway(upstream, fallback=None, max_attempts=1)``: a pipeline of fakes."""
    made: list[Gateway] = []

    def make(upstream: ScriptedUpstream, **kwargs: Any) -> Gateway:
        gateway = Gateway(tmp_path / f"gateway-{len(made)}", upstream, **kwargs)
        made.append(gateway)
        return gateway

    yield make
    for gateway in made:
        asyncio.run(gateway.access_log.close())
