"""The hooks the pipeline, the stages and the dispatcher call: each one ``None`` check when
tracing is off (``ctx.trace`` is None), so an untraced request pays next to nothing."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, cast

from localgate.exchange.context import RequestContext
from localgate.exchange.replies import UpstreamCall

if TYPE_CHECKING:
    from localgate.telemetry.tracer import RequestTrace

__all__ = ["AttemptSpan", "StageSpan", "answer", "attempt", "end_request", "stage"]


class StageSpan(Protocol):
    """A stage's span as a context manager: an exception leaving it marks it failed."""

    def __enter__(self) -> StageSpan: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class AttemptSpan(Protocol):
    """An upstream attempt's span; ``carry`` adds its ``traceparent`` to the call."""

    def __enter__(self) -> AttemptSpan: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def carry(self, call: UpstreamCall) -> UpstreamCall:
        """``call`` with this attempt's W3C trace context in its headers."""
        ...


class _Untraced:
    """The span of an untraced request: does nothing, one shared instance."""

    __slots__ = ()

    def __enter__(self) -> _Untraced:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def carry(self, call: UpstreamCall) -> UpstreamCall:
        return call


_UNTRACED = _Untraced()


class _Both:
    """A traced stage's span and its timer, entered and left together."""

    __slots__ = ("_span", "_timer")

    def __init__(self, span: StageSpan, timer: StageSpan) -> None:
        self._span = span
        self._timer = timer

    def __enter__(self) -> _Both:
        self._span.__enter__()
        self._timer.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._timer.__exit__(kind, exc, tb)
        self._span.__exit__(kind, exc, tb)


class Upstreamish(Protocol):
    """What an attempt's span needs to know of its upstream."""

    @property
    def name(self) -> str: ...

    @property
    def local(self) -> bool: ...


def stage(
    ctx: RequestContext, name: str, timer: Callable[[], StageSpan] | None = None
) -> StageSpan:
    """A span around stage ``name`` (identity, limits, redaction, retrieval, cache, audit).

    ``timer`` makes the stage's latency metric (``GatewayMetrics.stages``): untraced, it is
    the only context manager a stage enters, so timing a stage costs one block, not two.
    """
    trace = ctx.trace
    if trace is None:
        return _UNTRACED if timer is None else timer()
    span = cast("RequestTrace", trace).stage(ctx, name)
    return span if timer is None else _Both(span, timer())


def attempt(ctx: RequestContext, upstream: Upstreamish, number: int) -> AttemptSpan:
    """A span around attempt ``number`` (1, 2, ...) of sending the request to ``upstream``."""
    trace = ctx.trace
    if trace is None:
        return _UNTRACED
    return cast("RequestTrace", trace).attempt(ctx, upstream.name, upstream.local, number)


def answer(ctx: RequestContext, event: Any) -> None:
    """Note a unary answer or a stream event: time to first chunk, finish reasons."""
    trace = ctx.trace
    if trace is not None:
        cast("RequestTrace", trace).answer(event)


def end_request(ctx: RequestContext, status: int, error_status: str | None) -> None:
    """End the request's server span with how the request ended (once; later calls no-op)."""
    trace = ctx.trace
    if trace is not None:
        ctx.trace = None
        cast("RequestTrace", trace).end(ctx, status, error_status)
