"""The connection's limits, against a real gateway on loopback with raw sockets.

The gateway under test gives clients 1 s for a header and 1 s for a body; the tests
wait for its answers with deadlines many times longer, since the machine may be loaded.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from localgate.testing import FakeGemini
from tests.conftest import RunningGateway, run_gateway, wait_until

GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
TIMEOUT_S = 1.0
DEADLINE_S = 20.0  # how long a test waits for the gateway, far beyond any limit under test
STRICT = f"""\
server:
  header_timeout_s: {TIMEOUT_S}
  body_timeout_s: {TIMEOUT_S}
  max_pending_connections_per_ip: 64
"""


@dataclass
class Answer:
    """What the gateway wrote before closing, and when it closed."""

    status: int | None
    headers: dict[str, str]
    body: bytes
    elapsed: float  # from the connection's start to the gateway's close

    def error(self) -> dict[str, Any]:
        """The Gemini envelope's ``error``, checked against the status line."""
        assert self.headers["content-type"].startswith("application/json")
        envelope = json.loads(self.body)
        assert set(envelope) == {"error"}
        error: dict[str, Any] = envelope["error"]
        assert error["code"] == self.status
        assert error["message"]
        return error


@pytest.fixture(scope="module")
def strict(
    fake_upstream: FakeGemini, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    """A gateway with 1 s header and body deadlines."""
    data = tmp_path_factory.mktemp("strict")
    with run_gateway(data, fake_upstream.base_url, config=STRICT) as gateway:
        yield gateway


def address(gateway: RunningGateway) -> tuple[str, int]:
    host, port = gateway.base_url.removeprefix("http://").split(":")
    return host, int(port)


def connect(gateway: RunningGateway) -> socket.socket:
    return socket.create_connection(address(gateway), timeout=DEADLINE_S)


def read_until_closed(sock: socket.socket, started: float) -> Answer:
    """Everything the gateway sends until it closes; fails if it does not within the deadline."""
    sock.settimeout(DEADLINE_S)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return parse(received, time.monotonic() - started)


def parse(received: bytes, elapsed: float) -> Answer:
    if not received:
        return Answer(None, {}, b"", elapsed)
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(status_line.split()[1]), headers, body, elapsed)


def request_head(*, key: str = "", length: int | None = None, extra: str = "") -> bytes:
    lines = [f"POST {GENERATE} HTTP/1.1", "host: localgate", "content-type: application/json"]
    if key:
        lines.append(f"x-goog-api-key: {key}")
    if length is not None:
        lines.append(f"content-length: {length}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def healthz(gateway: RunningGateway) -> int:
    with gateway.client() as client:
        return client.get("/healthz").status_code


# -- header deadline ------------------------------------------------------------------


def test_half_sent_header_gets_408_and_the_connection_closes(strict: RunningGateway) -> None:
    started = time.monotonic()
    with connect(strict) as sock:
        sock.sendall(f"POST {GENERATE} HTTP/1.1\r\nhost: localgate\r\n".encode())
        answer = read_until_closed(sock, started)

    assert answer.status == 408
    error = answer.error()
    assert error["status"] == "DEADLINE_EXCEEDED"
    assert "server.header_timeout_s" in error["message"]
    assert answer.headers["connection"] == "close"
    assert answer.elapsed >= TIMEOUT_S * 0.9


def test_trickled_header_is_cut_off_counting_from_its_first_byte(
    strict: RunningGateway,
) -> None:
    """A byte every 100 ms never completes the header; the deadline does not restart."""
    header = request_head(extra="x-filler: " + "a" * 500 + "\r\n")
    started = time.monotonic()
    sent = 0
    with connect(strict) as sock:
        sock.settimeout(0.1)  # paces the trickle and notices the answer
        received = b""
        while time.monotonic() - started < DEADLINE_S:
            sock.sendall(header[sent : sent + 1])
            sent += 1
            try:
                received = sock.recv(65536)
            except TimeoutError:
                continue
            break
        sock.settimeout(DEADLINE_S)
        while chunk := sock.recv(65536):
            received += chunk
    answer = parse(received, time.monotonic() - started)

    assert answer.status == 408
    assert sent < len(header)
    assert TIMEOUT_S * 0.9 <= answer.elapsed < DEADLINE_S


def test_connection_that_never_sends_is_closed_without_an_answer(
    strict: RunningGateway,
) -> None:
    started = time.monotonic()
    with connect(strict) as sock:
        answer = read_until_closed(sock, started)

    assert answer.status is None
    assert answer.elapsed >= TIMEOUT_S * 0.9


def test_many_half_sent_headers_are_all_closed_while_others_are_served(
    strict: RunningGateway,
) -> None:
    """Slowloris: 50 connections hold half a header each; none outlives the deadline."""
    started = time.monotonic()
    with ExitStack() as stack:
        socks = [stack.enter_context(connect(strict)) for _ in range(50)]
        for sock in socks:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: loc")
        served = healthz(strict)
        answers = [read_until_closed(sock, started) for sock in socks]

    assert served == 200
    assert {answer.status for answer in answers} == {408}
    assert max(answer.elapsed for answer in answers) < DEADLINE_S


def test_kept_alive_connection_gets_a_new_header_deadline(strict: RunningGateway) -> None:
    started = time.monotonic()
    with connect(strict) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: localgate\r\n\r\n")
        first = sock.recv(65536)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: loc")  # the next one, half sent
        answer = read_until_closed(sock, started)

    assert first.startswith(b"HTTP/1.1 200")
    assert answer.status == 408


def test_stray_bytes_after_an_answer_do_not_hold_the_connection(strict: RunningGateway) -> None:
    """A blank line after a request used to cancel the keep-alive timeout for good."""
    started = time.monotonic()
    with connect(strict) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: localgate\r\n\r\n")
        first = sock.recv(65536)
        sock.sendall(b"\r\n")
        answer = read_until_closed(sock, started)

    assert first.startswith(b"HTTP/1.1 200")
    assert answer.elapsed < DEADLINE_S


def test_half_header_pipelined_behind_a_whole_request_gets_its_deadline(
    strict: RunningGateway,
) -> None:
    started = time.monotonic()
    with connect(strict) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nhost: localgate\r\n\r\nGET /healthz HTTP/1.1\r\nhos"
        )
        answer = read_until_closed(sock, started)

    assert answer.status == 200
    assert parse(answer.body.partition(b"}")[2], 0).status == 408


# -- body deadline --------------------------------------------------------------------


@pytest.mark.parametrize("framing", ["length", "chunked", "expect-100"])
def test_half_sent_body_gets_408_and_is_logged_as_such(
    framing: str, strict: RunningGateway, fake_upstream: FakeGemini
) -> None:
    fake_upstream.reset()
    if framing == "length":
        raw = request_head(key=strict.key, length=100) + b'{"contents": ['
    elif framing == "chunked":
        raw = request_head(key=strict.key, extra="transfer-encoding: chunked\r\n") + b'5\r\n{"con'
    else:  # asks whether to send the body, then never does
        raw = request_head(key=strict.key, length=100, extra="expect: 100-continue\r\n")

    def timeouts_logged() -> int:
        return sum(record["status"] == 408 for record in strict.access_records())

    logged_before = timeouts_logged()
    started = time.monotonic()
    with connect(strict) as sock:
        sock.sendall(raw)
        answer = read_until_closed(sock, started)
    if framing == "expect-100":
        assert answer.status == 100  # the go-ahead; the refusal follows it
        answer = parse(answer.body, answer.elapsed)

    assert answer.status == 408
    assert "server.body_timeout_s" in answer.error()["message"]
    assert answer.elapsed >= TIMEOUT_S * 0.9
    wait_until(lambda: timeouts_logged() == logged_before + 1, DEADLINE_S)
    assert fake_upstream.requests == []


def test_body_trickled_after_an_early_answer_is_not_awaited_forever(
    strict: RunningGateway,
) -> None:
    """Refused before its body is read (413), the client cannot keep the connection by
    trickling the rest of the body."""
    started = time.monotonic()
    with connect(strict) as sock:
        sock.sendall(request_head(key=strict.key, length=50 * 1024 * 1024) + b"{")
        sock.settimeout(0.1)
        received = b""
        closed = False
        while not closed and time.monotonic() - started < DEADLINE_S:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                sock.sendall(b" ")  # one more byte of body every 100 ms
                continue
            received += chunk
            closed = not chunk

    answer = parse(received, time.monotonic() - started)
    assert closed
    assert answer.status == 413
    assert answer.elapsed >= TIMEOUT_S * 0.9


# -- header size ----------------------------------------------------------------------


def oversized(shape: str) -> list[bytes]:
    """A request whose header exceeds 64 KiB, in the pieces it is sent in."""
    if shape == "one-header":
        return [request_head(extra=f"x-big: {'a' * 70 * 1024}\r\n")]
    if shape == "many-headers":
        lines = "".join(f"x-h{index}: {'b' * 70}\r\n" for index in range(1000))
        return [request_head(extra=lines)]
    if shape == "long-url":
        return [f"GET /healthz?{'c' * 70 * 1024} HTTP/1.1\r\nhost: x\r\n\r\n".encode()]
    raw = request_head(extra=f"x-big: {'d' * 70 * 1024}\r\n")
    return [raw[start : start + 4096] for start in range(0, len(raw), 4096)]


@pytest.mark.parametrize("shape", ["one-header", "many-headers", "long-url", "in-pieces"])
def test_header_over_64_kib_gets_431(shape: str, gateway: RunningGateway) -> None:
    started = time.monotonic()
    with connect(gateway) as sock:
        for piece in oversized(shape):
            sock.sendall(piece)
        answer = read_until_closed(sock, started)

    assert answer.status == 431
    error = answer.error()
    assert error["status"] == "INVALID_ARGUMENT"
    assert "65536 bytes (server.max_header_bytes)" in error["message"]


def test_header_under_the_cap_is_served(gateway: RunningGateway) -> None:
    with gateway.client() as client:
        response = client.get("/healthz", headers={"x-big": "e" * 60 * 1024})

    assert response.status_code == 200


def test_endless_header_is_refused_long_before_its_end(gateway: RunningGateway) -> None:
    """A 32 MiB header is not buffered: the 431 comes after little more than the cap."""
    piece = b"f" * 65536
    sent = 0
    with connect(gateway) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-endless: ")
        sock.setblocking(False)
        received = b""
        deadline = time.monotonic() + DEADLINE_S
        while not received and sent < 32 * 1024 * 1024 and time.monotonic() < deadline:
            with suppress(BlockingIOError):
                received = sock.recv(65536)
            with suppress(BlockingIOError):  # the gateway is not reading: poll for its answer
                sent += sock.send(piece)
        sock.settimeout(DEADLINE_S)
        while chunk := sock.recv(65536):
            received += chunk

    assert parse(received, 0).status == 431
    assert sent < 4 * 1024 * 1024


# -- malformed requests ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "status", "canonical"),
    [
        (b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: lots\r\n\r\n", 400, "INVALID_ARGUMENT"),
        (
            b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
            400,
            "INVALID_ARGUMENT",
        ),
        (
            b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n"
            b"transfer-encoding: chunked\r\n\r\n",
            400,
            "INVALID_ARGUMENT",
        ),
        (b"GET /healthz HTTP/1.1\r\nbad header\r\n\r\n", 400, "INVALID_ARGUMENT"),
        (b"GET /a b HTTP/1.1\r\nhost: x\r\n\r\n", 400, "INVALID_ARGUMENT"),
        (b"GET /healthz HTTP/7.1\r\nhost: x\r\n\r\n", 400, "INVALID_ARGUMENT"),
        (b"FOO /healthz HTTP/1.1\r\nhost: x\r\n\r\n", 501, "UNIMPLEMENTED"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 501, "UNIMPLEMENTED"),  # TLS hello
    ],
    ids=[
        "bad-length",
        "two-lengths",
        "length-and-chunked",
        "bad-header",
        "space-in-target",
        "bad-version",
        "unknown-method",
        "tls",
    ],
)
def test_malformed_request_gets_the_gemini_envelope(
    raw: bytes, status: int, canonical: str, gateway: RunningGateway
) -> None:
    started = time.monotonic()
    with connect(gateway) as sock:
        sock.sendall(raw)
        answer = read_until_closed(sock, started)

    assert answer.status == status
    assert answer.error()["status"] == canonical


# -- pending connections per address --------------------------------------------------


@contextmanager
def limited_gateway(
    tmp_path: Path, upstream: FakeGemini, extra: str = ""
) -> Iterator[RunningGateway]:
    config = "server:\n  max_pending_connections_per_ip: 3\n" + extra
    with run_gateway(tmp_path / "data", upstream.base_url, config=config) as gateway:
        yield gateway


def test_connections_beyond_the_pending_limit_are_refused_at_once(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with limited_gateway(tmp_path, upstream) as gateway, ExitStack() as stack:
        pending = [stack.enter_context(connect(gateway)) for _ in range(3)]
        pending[0].sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")  # half a header
        started = time.monotonic()
        with connect(gateway) as extra:
            refused = read_until_closed(extra, started)
        pending[1].close()  # one leaves: room for one more

        def admitted() -> bool:
            try:
                return healthz(gateway) == 200
            except httpx.HTTPError:
                return False  # refused: the gateway has not seen the close yet

        wait_until(admitted, DEADLINE_S)

    assert refused.status == 503
    error = refused.error()
    assert error["status"] == "UNAVAILABLE"
    assert "server.max_pending_connections_per_ip = 3" in error["message"]
    assert refused.elapsed < 10  # refused on arrival, not at the 10 s header deadline


def test_kept_alive_idle_connections_do_not_count_as_pending(
    tmp_path: Path, upstream: FakeGemini
) -> None:
    with limited_gateway(tmp_path, upstream) as gateway, ExitStack() as stack:
        for _ in range(5):
            sock = stack.enter_context(connect(gateway))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        served = healthz(gateway)

    assert served == 200


def test_trusted_proxies_are_not_limited(tmp_path: Path, upstream: FakeGemini) -> None:
    extra = "  trusted_proxies: ['127.0.0.0/8']\n"
    with limited_gateway(tmp_path, upstream, extra) as gateway, ExitStack() as stack:
        for _ in range(5):
            stack.enter_context(connect(gateway))
        served = healthz(gateway)

    assert served == 200


def test_oversized_header_pipelined_across_reads_gets_431(gateway: RunningGateway) -> None:
    """A header that begins in the read that ended the previous request is still measured."""
    half = b"x-big: " + b"h" * 40 * 1024
    started = time.monotonic()
    with connect(gateway) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\nGET /healthz HTTP/1.1\r\n" + half)
        first = sock.recv(65536)  # the first answer: the second request's start was read
        sock.sendall(b"h" * 40 * 1024 + b"\r\n\r\n")
        answer = read_until_closed(sock, started)

    assert first.startswith(b"HTTP/1.1 200")
    assert answer.status == 431


@pytest.mark.parametrize(
    "second",
    [
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: " + b"g" * 70 * 1024 + b"\r\n\r\n",
        b"FOO /healthz HTTP/1.1\r\nhost: x\r\n\r\n",
    ],
    ids=["oversized", "unknown-method"],
)
def test_refusal_behind_a_pipelined_request_comes_after_its_answer(
    second: bytes, gateway: RunningGateway, upstream: FakeGemini
) -> None:
    """Pipelined behind a request still being answered, a refusal waits its turn: the
    client matches answers to requests by their order."""
    upstream.delay(0.3)  # the first answer is still on its way when the second arrives
    body = json.dumps({"contents": [{"parts": [{"text": "hi"}]}]}).encode()
    first = request_head(key=gateway.key, length=len(body)) + body
    started = time.monotonic()
    with connect(gateway) as sock:
        sock.sendall(first + second)
        received = read_until_closed(sock, started)

    answers = received.body.split(b"HTTP/1.1 ")
    assert received.status == 200
    assert len(answers) == 2
    assert answers[1].startswith((b"431 ", b"501 "))
