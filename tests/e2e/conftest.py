"""Fixtures of the end-to-end tests: the official SDK pointed at the gateway."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google import genai
from google.genai import types

from tests.conftest import RunningGateway


@pytest.fixture
def client(gateway: RunningGateway) -> Iterator[genai.Client]:
    """The google-genai SDK on the shared gateway's v1beta routes, with its tenant key."""
    sdk = genai.Client(
        api_key=gateway.key,
        http_options=types.HttpOptions(base_url=gateway.base_url, api_version="v1beta"),
    )
    yield sdk
    sdk.close()
