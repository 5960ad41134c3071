"""The HTTP/1.1 connection: uvicorn's httptools protocol, with the limits it lacks.

uvicorn bounds neither how long a client may take to send a request nor how large its
header may be, and it refuses malformed requests in plain text. This subclass adds:

- a header deadline (``server.header_timeout_s``) from a connection's start, or from the
  first bytes after a complete request, to the end of the header: 408, then the
  connection closes (a new connection that never sent a byte is just closed);
- a body deadline (``server.body_timeout_s``) from the end of the header to the end of
  the body: 408 if nothing has been answered yet, else the connection just closes (an
  answer sent early does not let the client trickle the rest of its body forever);
- a size cap on the request line and headers (``server.max_header_bytes``): 431;
- a cap on connections from one address that are still sending their request
  (``server.max_pending_connections_per_ip``): a new one beyond it gets 503 and is closed;
- the Gemini error envelope for requests the parser refuses: 400, or 501 for a method
  it does not know.

Besides the one deadline of a new connection, a deadline is armed and the pending count
kept only for a request that spans more than one read, and the header's size is added up
only when the reads it came in were larger than the cap: a request that arrives whole, as
nearly all do, costs none of that (about 6,000 instructions per request over uvicorn's own
protocol, measured with callgrind).

After a refusal the gateway stops sending (half-close) and discards what still arrives
for a moment before closing: closing with unread input makes the kernel reset the
connection, and the client could lose the refusal with it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from localgate.config import ServerSettings
from localgate.errors import (
    HeaderTooLarge,
    InvalidArgument,
    LocalgateError,
    RequestTimeout,
    ServiceUnavailable,
    Unimplemented,
)
from localgate.frontdoor.body import BODY_TIMED_OUT
from localgate.gemini.envelope import error_envelope
from localgate.gemini.framing import dump_json
from localgate.identity.certificates import peer_certificate

__all__ = ["CLIENT_CERTIFICATE", "gateway_protocol"]

# The scope key of the connection's verified client certificate (mTLS), if it showed one.
CLIENT_CERTIFICATE = "localgate.client_certificate"

logger = logging.getLogger("localgate")

# How long input is still read (and dropped) after a refusal before the connection closes.
_LINGER_S = 2.0
# Bytes of a request line besides the method and the target ("  HTTP/1.1\r\n"), and of the
# header's end ("\r\n"); per header, ": " and "\r\n".
_REQUEST_LINE_BYTES = 13
_HEADER_LINE_BYTES = 4
# A connection's phase: between requests (or the app is answering), waiting for or reading
# a header, reading a body.
_IDLE, _HEAD, _BODY = "idle", "head", "body"


@dataclass(frozen=True, slots=True)
class _Limits:
    header_timeout_s: float
    body_timeout_s: float
    max_header_bytes: int
    max_pending_per_ip: int
    exempt: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] | None  # None: all

    def limits_address(self, address: str) -> bool:
        """Whether connections from ``address`` count against the pending limit."""
        if self.max_pending_per_ip == 0 or self.exempt is None:
            return False
        if not self.exempt:
            return True
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return True
        return not any(ip in network for network in self.exempt)


def gateway_protocol(settings: ServerSettings) -> type[asyncio.Protocol]:
    """The protocol class uvicorn runs the gateway with (its ``http`` option)."""
    trusted = settings.trusted_proxies
    exempt = (
        None
        if "*" in trusted
        else tuple(ipaddress.ip_network(entry, strict=False) for entry in trusted)
    )
    limits = _Limits(
        header_timeout_s=settings.header_timeout_s,
        body_timeout_s=settings.body_timeout_s,
        max_header_bytes=settings.max_header_bytes,
        max_pending_per_ip=settings.max_pending_connections_per_ip,
        exempt=exempt,
    )

    class Protocol(GatewayHttpProtocol):
        """The gateway's connections on one server: these limits, one pending count."""

    Protocol.limits = limits
    Protocol.max_header_bytes = limits.max_header_bytes
    Protocol.pending = {}
    return Protocol


class GatewayHttpProtocol(HttpToolsProtocol):
    """One client connection; the limits and the per-address count are the class's.

    The parser callbacks run for every request, so they call the base class directly
    (not through ``super()``) and keep the connection's phase in one field.
    """

    limits: ClassVar[_Limits]
    max_header_bytes: ClassVar[int]
    # Connections still sending a request, by peer address (shared by the server's connections).
    pending: ClassVar[dict[str, int]]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._phase = _IDLE
        self._deadline: asyncio.TimerHandle | None = None
        self._address: str | None = None  # the peer, if the pending limit applies to it
        self._counted = False  # counted among its address's pending connections
        self._head_bytes = 0  # bytes of the current header in earlier reads
        self._head_uncounted = False  # a read of the header was not counted (see below)
        self._read_bytes = 0  # size of the read being parsed
        # The scope of the last request received whole: uvicorn makes a new scope at each
        # request's first byte, so another one means a request has begun since.
        self._finished: Any = None
        self._refusal: LocalgateError | None = None  # raised from inside a parser callback
        self._refused = False
        self._deferred: LocalgateError | None = None  # a refusal waiting for an answer to go out
        # The client certificate the TLS handshake verified, read once per connection.
        self._certificate: Any = None

    # -- connection -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Count the connection under its address, or refuse it; start the header deadline."""
        super().connection_made(transport)
        if self.scheme == "https":
            self._certificate = peer_certificate(transport.get_extra_info("ssl_object"))
        limits = self.limits
        address = self.client[0] if self.client else None
        if address is not None and limits.limits_address(address):
            self._address = address
            if self.pending.get(address, 0) >= limits.max_pending_per_ip:
                self._refuse(
                    ServiceUnavailable(
                        f"Too many connections from {address} are still sending their "
                        f"request (server.max_pending_connections_per_ip = "
                        f"{limits.max_pending_per_ip}); finish or close them, then retry."
                    ),
                    linger=False,
                )
                return
            self._count()
        self._phase = _HEAD  # a new connection owes a request
        self._arm(limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection's timer and its place in the pending count."""
        super().connection_lost(exc)
        self._disarm()
        self._uncount()

    # -- parsing ----------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        """Parse a read, refusing what the parser or the limits refuse; arm deadlines."""
        if self._refused:
            return  # lingering after a refusal: input is dropped
        if self.timeout_keep_alive_task is not None:
            self._unset_keepalive_if_required()
        if self._phase is _IDLE:
            self._phase = _HEAD  # bytes after a complete request: the next one's header
        self._read_bytes = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no protocol switch is served: the request went on as plain HTTP
        except httptools.HttpParserInvalidMethodError:
            self._refuse(
                Unimplemented(
                    "Unknown HTTP method (or not HTTP at all); localgate serves GET and POST over "
                    "HTTP/1.1."
                )
            )
            return
        except httptools.HttpParserError as exc:
            self._refuse(self._refusal or _malformed(exc))
            return
        phase = self._phase
        if phase is _IDLE:
            if self.scope is self._finished:
                return  # the usual case: the request arrived whole
            # Another request began in this read after one ended (pipelining). How much
            # of the read is its header is unknown: the exact sum at its end decides.
            self._phase = phase = _HEAD
            self._head_uncounted = True
        elif phase is _HEAD:
            # No request ended in this read: all of it belongs to this header.
            self._head_bytes += len(data)
            if self._head_bytes > self.max_header_bytes:
                self._refuse(self._header_too_large())
                return
        # A request spans reads: it has a deadline and counts as pending.
        if self._deadline is None:
            limits = self.limits
            self._arm(limits.header_timeout_s if phase is _HEAD else limits.body_timeout_s)
        if not self._counted and self._address is not None:
            self._count()

    def on_headers_complete(self) -> None:
        """Check the header's size, then hand the request to the application."""
        if self._head_uncounted or self._head_bytes + self._read_bytes > self.max_header_bytes:
            size = (
                len(self.url)
                + len(self.parser.get_method())
                + _REQUEST_LINE_BYTES
                + sum(len(name) + len(value) + _HEADER_LINE_BYTES for name, value in self.headers)
            )
            if size > self.max_header_bytes:
                self._refusal = self._header_too_large()
                raise self._refusal  # stops the parser; data_received answers
            self._head_uncounted = False
        self._head_bytes = 0
        self._phase = _BODY
        if self._deadline is not None:
            self._disarm()
        if self._certificate is not None:
            self.scope[CLIENT_CERTIFICATE] = self._certificate  # type: ignore[literal-required]
        HttpToolsProtocol.on_headers_complete(self)

    def on_message_complete(self) -> None:
        """The whole request is in: no deadline, not pending, until the next one begins."""
        HttpToolsProtocol.on_message_complete(self)
        self._phase = _IDLE
        self._finished = self.scope
        if self._deadline is not None:
            self._disarm()
        if self._counted:
            self._uncount()

    def _header_begun(self) -> bool:
        # uvicorn gives a connection its header list at its first request's first byte.
        return cast("list[tuple[bytes, bytes]] | None", self.headers) is not None

    # -- deadlines --------------------------------------------------------------------

    def _arm(self, delay: float) -> None:
        self._deadline = self.loop.call_later(delay, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self._refused or self.transport.is_closing():
            return
        limits = self.limits
        cycle = self.cycle
        if self._phase is _HEAD:
            if cycle is not None and not cycle.response_complete:
                # A pipelined header behind an answer still being sent: the client is
                # reading that answer, so its next request's clock starts afterwards.
                self._arm(limits.header_timeout_s)
            elif not self._header_begun():
                self.transport.close()  # a new connection that never sent a byte: no answer
            else:
                self._refuse(
                    RequestTimeout(
                        f"The request header did not arrive within {limits.header_timeout_s:g} s "
                        "(server.header_timeout_s); send the whole request at once."
                    )
                )
        elif self._phase is _BODY:
            if cycle is None or cycle.response_started:
                # Already answered (without reading the body): the rest is not awaited.
                self.transport.close()
                return
            # The application is waiting for the body: it learns why it was cut off
            # (its access-log line says 408), and its own answer goes nowhere.
            cycle.scope[BODY_TIMED_OUT] = True  # type: ignore[literal-required]
            cycle.disconnected = True
            cycle.message_event.set()
            self._refuse(
                RequestTimeout(
                    f"The request body did not arrive within {limits.body_timeout_s:g} s "
                    "(server.body_timeout_s); send it at once, or raise the limit."
                )
            )

    # -- refusing ---------------------------------------------------------------------

    def _header_too_large(self) -> HeaderTooLarge:
        limit = self.limits.max_header_bytes
        return HeaderTooLarge(
            f"The request line and headers exceed {limit} bytes (server.max_header_bytes); "
            "send less in headers."
        )

    def _refuse(self, error: LocalgateError, *, linger: bool = True) -> None:
        """Answer ``error`` in the Gemini envelope and end the connection.

        Behind a pipelined request still being answered, the refusal waits for that
        answer: clients match answers to requests by their order.
        """
        if not self._refused:
            # As uvicorn logs its own refusals; the message names no request content.
            client = self.client[0] if self.client else "?"
            logger.warning("refused a connection from %s: %d %s", client, error.code, error.message)
        self._refused = True
        self._disarm()
        self._uncount()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not cycle.disconnected:
            self._deferred = error
            cycle.on_response = self._answered  # the last request parsed is answered last
            self.flow.pause_reading()
            return
        body = dump_json(error_envelope(error))
        head = [STATUS_LINE[error.code]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json; charset=UTF-8\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
            body,
        ]
        transport = self.transport
        transport.write(b"".join(head))
        if linger and transport.can_write_eof():
            transport.write_eof()
            self._deadline = self.loop.call_later(_LINGER_S, transport.close)
        else:
            transport.close()

    def _answered(self) -> None:
        """The last answer went out: the refusal waiting behind it goes out now."""
        HttpToolsProtocol.on_response_complete(self)
        error = self._deferred
        if error is not None and not self.transport.is_closing():
            self._deferred = None
            self._refuse(error)

    # -- pending count ----------------------------------------------------------------

    def _count(self) -> None:
        address = self._address
        if address is not None and not self._counted:
            self._counted = True
            self.pending[address] = self.pending.get(address, 0) + 1

    def _uncount(self) -> None:
        address = self._address
        if address is not None and self._counted:
            self._counted = False
            left = self.pending[address] - 1
            if left:
                self.pending[address] = left
            else:
                del self.pending[address]


def _malformed(exc: httptools.HttpParserError) -> InvalidArgument:
    # The parser's reason names the fault in the client's bytes ("Invalid character in
    # Content-Length", ...); a callback's failure is ours or uvicorn's and is not shown.
    reason = "" if isinstance(exc, httptools.HttpParserCallbackError) else f" ({exc})"
    return InvalidArgument(
        f"Invalid HTTP request received{reason}; send a well-formed HTTP/1.1 request."
    )
