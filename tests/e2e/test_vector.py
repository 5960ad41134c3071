"""Retrieval, local embeddings and a shared Chroma server, through the real gateway."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import types

from localgate.rag.library import Library
from localgate.testing import FakeGemini
from localgate.vectorstore.embedders import build_embedder
from localgate.vectorstore.store import VectorStore
from tests.conftest import RunningGateway, run_gateway, wait_until
from tests.e2e.sdk_parts import parts

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
HANDBOOK = """# Leave policy

Employees get 15 days of paid annual leave per year. Requests go to 张伟 (phone
13812345678) at least two weeks ahead.

# Expenses

Travel expenses are reimbursed within 30 days when the receipt is attached.
"""
RAG = """
rag:
  enabled: true
  min_similarity: 0.05
"""


def ingest(gateway: RunningGateway, tenant: str, collection: str, folder: Path) -> None:
    settings = gateway.settings
    store = VectorStore(settings)
    try:
        library = Library(settings, store, build_embedder(settings.embeddings))
        report = store.sync(library.ingest, tenant, collection, [folder])
    finally:
        store.close()
    assert report.ok


@pytest.fixture
def documents(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "handbook.md").write_text(HANDBOOK)
    return folder


@pytest.fixture
def rag_gateway(tmp_path: Path, upstream: FakeGemini) -> Iterator[RunningGateway]:
    with run_gateway(tmp_path / "data", upstream.base_url, config=RAG) as gateway:
        yield gateway


def post(gateway: RunningGateway, body: dict[str, Any], **headers: str) -> httpx.Response:
    return gateway.generate(body, **headers)


QUESTION = {"contents": [{"role": "user", "parts": [{"text": "How many days of annual leave?"}]}]}


def test_retrieved_passages_go_upstream_redacted_in_the_system_instruction(
    rag_gateway: RunningGateway, upstream: FakeGemini, documents: Path
) -> None:
    # Ingested while the gateway runs: it notices and reopens the embedded store.
    ingest(rag_gateway, "acme", "handbook", documents)

    response = post(rag_gateway, QUESTION, **{"x-localgate-rag-collection": "handbook"})

    assert response.status_code == 200
    sent = upstream.requests[-1].body
    context = sent["systemInstruction"]["parts"][-1]["text"]
    assert 'collection "handbook"' in context
    assert "15 days of paid annual leave" in context
    assert "(source: handbook.md)" in context
    assert "13812345678" not in str(sent)
    assert "张伟" not in str(sent)
    assert "[CN_MOBILE]" in context


def test_the_audit_record_lists_the_passages_used(
    rag_gateway: RunningGateway, upstream: FakeGemini, documents: Path
) -> None:
    ingest(rag_gateway, "acme", "handbook", documents)
    response = post(rag_gateway, QUESTION, **{"x-localgate-rag-collection": "handbook"})
    headers = rag_gateway.audit_headers(response.headers["x-request-id"])
    record = next((header for header in headers if header["kind"] == "request"), None)

    assert record is not None
    assert record["rag"]["collection"] == "handbook"
    assert record["rag"]["passages"]
    assert all(isinstance(passage, str) for passage in record["rag"]["passages"])
    assert "annual leave" not in str(record)


def test_the_answer_says_whether_retrieval_added_passages(
    tmp_path: Path, upstream: FakeGemini, documents: Path
) -> None:
    unrelated = {"contents": [{"role": "user", "parts": [{"text": "今天天气怎么样"}]}]}
    named = {"x-goog-api-key": "", "x-localgate-rag-collection": "handbook"}
    # The default rag.min_similarity: the unrelated question finds nothing.
    with run_gateway(tmp_path / "data", upstream.base_url, config="rag: {enabled: true}") as gw:
        ingest(gw, "acme", "handbook", documents)
        named["x-goog-api-key"] = gw.key
        with gw.client(headers=named) as client:
            found = client.post(GENERATE, json=QUESTION)
            nothing = client.post(GENERATE, json=unrelated)
            streamed = client.post(STREAM, json=QUESTION)
            streamed_nothing = client.post(STREAM, json=unrelated)
        without = post(gw, QUESTION)  # no collection named: retrieval does not apply

    assert found.status_code == nothing.status_code == streamed.status_code == 200
    assert found.headers["x-localgate-rag"] == "added; passages=1"
    assert streamed.headers["x-localgate-rag"] == "added; passages=1"
    assert nothing.headers["x-localgate-rag"] == "none"
    assert streamed_nothing.headers["x-localgate-rag"] == "none"
    assert "x-localgate-rag" not in without.headers
    sent = [request.body for request in upstream.requests]
    assert ["systemInstruction" in body for body in sent] == [True, False, True, False, False]


def test_a_tenant_cannot_retrieve_another_tenants_collection(
    rag_gateway: RunningGateway, upstream: FakeGemini, documents: Path
) -> None:
    ingest(rag_gateway, "globex", "handbook", documents)

    response = post(rag_gateway, QUESTION, **{"x-localgate-rag-collection": "handbook"})

    assert response.status_code == 404
    assert response.json()["error"]["status"] == "NOT_FOUND"
    assert upstream.requests == []


def test_retrieval_needs_the_tenant_policy(
    tmp_path: Path, upstream: FakeGemini, documents: Path
) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url, config="cache: {enabled: true}") as gw:
        response = post(gw, QUESTION, **{"x-localgate-rag-collection": "handbook"})

    assert response.status_code == 403
    assert "rag.enabled" in response.json()["error"]["message"]
    assert upstream.requests == []


def test_the_tenant_policy_collection_is_used_without_a_header(
    tmp_path: Path, upstream: FakeGemini, documents: Path
) -> None:
    config = RAG + "tenants:\n  acme:\n    rag: {collection: handbook}\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        ingest(gateway, "*", "handbook", documents)  # shared with every tenant
        post(gateway, QUESTION)

    assert "annual leave" in str(upstream.requests[-1].body["systemInstruction"])


LOCAL_EMBEDDINGS = "local_embeddings: true\n"


def test_embeddings_are_computed_locally_for_the_sdk(tmp_path: Path, upstream: FakeGemini) -> None:
    with run_gateway(tmp_path / "data", upstream.base_url, config=LOCAL_EMBEDDINGS) as gateway:
        sdk = genai.Client(
            api_key=gateway.key,
            http_options=types.HttpOptions(base_url=gateway.base_url, api_version="v1beta"),
        )
        single = sdk.models.embed_content(
            model="gemini-embedding-001", contents="客户张伟的退货申请"
        )
        batch = sdk.models.embed_content(
            model="gemini-embedding-001",
            contents=parts("refund policy", "退货政策", "refund policy"),
        )
        sdk.close()
        with gateway.client(headers={"x-goog-api-key": gateway.key}) as client:
            raw = client.post(
                "/v1beta/models/gemini-embedding-001:embedContent",
                json={"content": {"parts": [{"text": "hello"}]}, "outputDimensionality": 768},
            )

    assert upstream.requests == []
    assert single.embeddings is not None
    assert len(single.embeddings[0].values or []) == 512
    assert batch.embeddings is not None
    vectors = [embedding.values or [] for embedding in batch.embeddings]
    assert vectors[0] == vectors[2]
    assert vectors[0] != vectors[1]
    assert raw.status_code == 400
    assert "512" in raw.json()["error"]["message"]


def test_the_answer_names_the_local_embedding_model(tmp_path: Path, upstream: FakeGemini) -> None:
    with (
        run_gateway(tmp_path / "data", upstream.base_url, config=LOCAL_EMBEDDINGS) as gateway,
        gateway.client(headers={"x-goog-api-key": gateway.key}) as client,
    ):
        response = client.post(
            "/v1beta/models/gemini-embedding-001:embedContent",
            json={"content": {"parts": [{"text": "hello"}]}},
        )

    assert response.headers["x-localgate-embedding-model"] == "localgate-terms-512"


def test_gateway_replicas_share_the_cache_through_a_chroma_server(
    tmp_path: Path, upstream: FakeGemini, chroma_server: str
) -> None:
    config = f"cache:\n  enabled: true\n  chroma_url: {chroma_server}\n"
    body = {
        "contents": [{"role": "user", "parts": [{"text": "Which replica answers 13812345678?"}]}],
        "generationConfig": {"temperature": 0},
    }
    with (
        run_gateway(tmp_path / "one", upstream.base_url, config=config) as one,
        run_gateway(tmp_path / "two", upstream.base_url, config=config) as two,
    ):
        first = post(one, body)

        def served_by_two() -> bool:
            response = post(two, body)
            return response.headers["x-localgate-cache"] == "hit; layer=exact"

        wait_until(served_by_two)

    assert first.headers["x-localgate-cache"] == "miss"
    assert "13812345678" in first.text


def test_a_store_that_never_answers_costs_a_request_no_more_than_its_budget(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        config = f"cache:\n  enabled: true\n  chroma_url: {url}\n  timeout_s: 0.5\n"
        body = {"contents": [{"role": "user", "parts": [{"text": "Anyone there?"}]}]}
        with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
            started = time.monotonic()
            first = post(gateway, body)
            second = post(gateway, body)
            took = time.monotonic() - started
            with gateway.client() as client:
                ready = client.get("/readyz")

    assert first.status_code == second.status_code == 200
    assert first.headers["x-localgate-cache"] == "miss"
    assert took < 5  # the budget once, then the store is left alone for a while
    assert ready.status_code == 200
    assert ready.json()["checks"]["vector_store"].startswith("degraded:")


def test_an_unreachable_store_is_a_miss_and_shows_in_readyz(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    config = f"cache:\n  enabled: true\n  chroma_url: {dead}\n"
    body = {"contents": [{"role": "user", "parts": [{"text": "Still answered?"}]}]}
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        response = post(gateway, body)
        with gateway.client() as client:
            ready = client.get("/readyz")
            metrics = client.get("/metrics").text

    assert response.status_code == 200
    assert response.headers["x-localgate-cache"] == "miss"
    assert len(upstream.requests) == 1
    assert ready.status_code == 200
    assert dead in ready.json()["checks"]["vector_store"]
    assert 'localgate_cache_errors_total{operation="lookup"} 1.0' in metrics


def test_a_collection_made_again_on_a_shared_server_is_found(
    tmp_path: Path, upstream: FakeGemini, documents: Path, chroma_server: str
) -> None:
    config = RAG + f"cache:\n  chroma_url: {chroma_server}\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        ingest(gateway, "acme", "server-handbook", documents)
        header = {"x-localgate-rag-collection": "server-handbook"}
        before = post(gateway, QUESTION, **header)
        store = VectorStore(gateway.settings)
        library = Library(gateway.settings, store, build_embedder(gateway.settings.embeddings))
        store.sync(library.delete, "acme", "server-handbook")
        store.close()
        ingest(gateway, "acme", "server-handbook", documents)
        after = post(gateway, QUESTION, **header)

    assert before.status_code == after.status_code == 200
    assert "annual leave" in str(upstream.requests[-1].body["systemInstruction"])


def test_a_collection_configured_for_others_does_not_refuse_this_tenant(
    tmp_path: Path, upstream: FakeGemini, documents: Path
) -> None:
    config = "rag:\n  collection: handbook\ntenants:\n  globex:\n    rag: {enabled: true}\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        response = post(gateway, QUESTION)

    assert response.status_code == 200
    assert "systemInstruction" not in upstream.requests[-1].body


def test_local_embeddings_are_on_record_as_answered_in_house(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with (
        run_gateway(tmp_path / "data", upstream.base_url, config=LOCAL_EMBEDDINGS) as gateway,
        gateway.client(headers={"x-goog-api-key": gateway.key}) as client,
    ):
        response = client.post(
            "/v1beta/models/gemini-embedding-001:embedContent",
            json={"content": {"parts": [{"text": "hello"}]}},
        )
        request, answer = gateway.audit_headers(response.headers["x-request-id"])

    assert request["served_from"] == {"local": "local-embedder"}
    assert "sent_digest" not in request
    assert answer["upstream"] == "local-embedder"
