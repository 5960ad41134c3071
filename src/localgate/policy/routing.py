"""A tenant's routing policy: the routes that apply to it, compiled, and where it may go.

Resolved with the rest of the tenant's policy once per configuration version, so routes,
model aliases and residency lists change on reload; the upstreams they name are built at
start (``upstreams`` needs a restart).
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import re
from dataclasses import dataclass

from localgate.config import DEFAULT_UPSTREAM, RouteSettings, Settings

__all__ = ["CompiledRoute", "ConfidenceRule", "RoutingPolicy", "SplitSide"]


@dataclass(frozen=True, slots=True)
class ConfidenceRule:
    """When an answer counts as low confidence, and the stronger model a unary one is
    asked again on (docs/quality.md)."""

    min_avg_logprob: float
    retry_on: str | None = None


@dataclass(frozen=True, slots=True)
class SplitSide:
    """One side of a route's split: where it goes, and the weights' running total."""

    chain: tuple[str, ...]
    model: str | None
    upto: int  # this side takes the buckets below this (and at or above the previous side's)


@dataclass(frozen=True, slots=True)
class CompiledRoute:
    """One entry of ``routes:`` as the router applies it."""

    index: int  # its place in ``routes:``, for messages and the hash of a split
    pattern: re.Pattern[str]
    chain: tuple[str, ...]  # the upstream, then its fallbacks
    model: str | None  # the model actually asked for (alias, pinned version)
    max_attempts: int
    sides: tuple[SplitSide, ...] = ()
    sticky: str = "tenant"  # or "user"
    # Only these tenants' requests (empty: everyone's). Checked per request: a tenant the
    # file names only here has no policy of its own.
    tenants: frozenset[str] = frozenset()
    # The route's low-confidence threshold (its own, else quality.min_avg_logprob) and
    # retry model; None when neither sets a threshold.
    confidence: ConfidenceRule | None = None

    def matches(self, model_id: str, tenant: str) -> bool:
        """Whether this route takes ``tenant``'s requests for ``model_id``."""
        if self.tenants and tenant not in self.tenants:
            return False
        return self.pattern.fullmatch(model_id) is not None

    def side_for(self, subject: str) -> SplitSide | None:
        """The side of the split ``subject`` (a tenant, a user) always gets; None without
        a split."""
        if not self.sides:
            return None
        digest = hashlib.blake2b(f"{self.index}:{subject}".encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest, "big") % self.sides[-1].upto
        for side in self.sides:
            if bucket < side.upto:
                return side
        return self.sides[-1]  # not reached: the last side's upto is the total


@dataclass(frozen=True, slots=True)
class RoutingPolicy:
    """The routes of one tenant, first match wins; and the upstreams it may reach."""

    routes: tuple[CompiledRoute, ...] = ()
    # Data residency: None lets the tenant reach every upstream.
    allowed: frozenset[str] | None = None
    # Where requests no route takes go (and model-less ones, such as models.list).
    default_chain: tuple[str, ...] = (DEFAULT_UPSTREAM,)
    default_max_attempts: int = 1
    # quality.min_avg_logprob, for requests no route with a threshold of its own takes.
    confidence: ConfidenceRule | None = None

    @classmethod
    def resolve(cls, settings: Settings, tenant: str) -> RoutingPolicy:
        """``tenant``'s routing under ``settings`` (``""``: tenants the file does not name)."""
        routes = tuple(
            CompiledRoute(
                index=settings.routes.index(route),
                pattern=re.compile(
                    "|".join(fnmatch.translate(glob) for glob in route.models), re.IGNORECASE
                ),
                chain=route.chain,
                model=route.model,
                max_attempts=settings.max_attempts_of(route),
                sides=_sides(route),
                sticky=route.sticky,
                tenants=frozenset(route.tenants),
                confidence=_confidence(route, settings.quality.min_avg_logprob),
            )
            for route in settings.routes
        )
        threshold = settings.quality.min_avg_logprob
        return cls(
            routes=routes,
            allowed=settings.upstreams_for(tenant) if tenant else None,
            default_max_attempts=settings.max_attempts_of(None),
            confidence=ConfidenceRule(threshold) if threshold is not None else None,
        )

    def route_for(self, model_id: str | None, tenant: str = "") -> CompiledRoute | None:
        """The first route taking ``tenant``'s requests for ``model_id``; None for no model
        or no matching route."""
        if model_id is None:
            return None
        for route in self.routes:
            if route.matches(model_id, tenant):
                return route
        return None


def _confidence(route: RouteSettings, default: float | None) -> ConfidenceRule | None:
    """The route's threshold (else the global one) and its retry model."""
    threshold = route.min_avg_logprob if route.min_avg_logprob is not None else default
    if threshold is None:
        return None
    return ConfidenceRule(threshold, route.retry_low_confidence_on)


def _sides(route: RouteSettings) -> tuple[SplitSide, ...]:
    """The split's sides with weight, each with the running total of the weights."""
    weighted = [side for side in route.split if side.weight > 0]
    totals = itertools.accumulate(side.weight for side in weighted)
    return tuple(
        SplitSide(chain=route.chain_of(side), model=side.model or route.model, upto=upto)
        for side, upto in zip(weighted, totals, strict=True)
    )
