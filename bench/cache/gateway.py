"""A ``localgate serve`` process over HTTP: started on a fresh data folder, asked, watched."""

from __future__ import annotations

import http.client
import json
import sys
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.cache.options import MINILM, Options
from bench.cache.prompts import GENERATE, UPSTREAM_KEY
from bench.servers import (
    BenchError,
    ServerProcess,
    clean_environment,
    create_tenant_key,
    free_ports,
    http_call,
    pinned,
)

__all__ = ["CACHE_HEADER", "REPO", "Gateway", "Reply", "gateway_config"]

REPO = Path(__file__).resolve().parents[2]
READY_DEADLINE_S = 90.0  # a gateway with MiniLM loads the model before it is ready
STORE_DEADLINE_S = 60.0
CACHE_HEADER = "x-localgate-cache"


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
        env = {
            **clean_environment(),
            "LOCALGATE_UPSTREAM_URL": self._upstream_url,
            "GEMINI_API_KEY": UPSTREAM_KEY,
            "LOCALGATE_DATA_DIR": str(self.folder / "data"),
            "LOCALGATE_CONFIG": str(self.folder / "localgate.yaml"),
        }
        localgate = str(Path(sys.executable).parent / "localgate")
        self.key = create_tenant_key(localgate, env)
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
        """Answers are stored after they are sent, after a linger and in batches: poll the
        gateway's count of stored answers until it reaches ``count``."""
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


def gateway_config(embedder: str, threshold: float | None, options: Options) -> str:
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
