"""The shipped example configuration starts a gateway that answers a new user's request."""

from __future__ import annotations

from pathlib import Path

from localgate.testing import FakeGemini
from tests.conftest import run_gateway

EXAMPLE = Path(__file__).parent.parent.parent / "config" / "localization.yaml"


def test_the_shipped_example_configuration_serves_a_plain_request(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url, config=EXAMPLE.read_text()) as gateway:
        response = gateway.generate({"contents": [{"parts": [{"text": "hello"}]}]})

    assert response.status_code == 200, response.text
    assert response.json()["candidates"][0]["content"]["parts"][0]["text"] == "echo: hello"
