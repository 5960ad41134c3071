"""Router: which upstreams may serve a request, in the order to try them, and the model
to ask them for."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from localgate.config import DEFAULT_UPSTREAM
from localgate.errors import PermissionDenied, ServiceUnavailable
from localgate.gemini.routes import GeminiMethod, GeminiRoute
from localgate.policy.routing import ConfidenceRule, RoutingPolicy
from localgate.policy.snapshot import TenantPolicy
from localgate.upstream.base import Catalogued, Upstream, needs_redaction

__all__ = ["DEFAULT_UPSTREAM", "RoutePlan", "Router"]

logger = logging.getLogger("localgate")

_EMBEDDING = frozenset({GeminiMethod.EMBED_CONTENT, GeminiMethod.BATCH_EMBED_CONTENTS})
_NO_ROUTING = RoutingPolicy()
# Plans kept for requests without routes (a few routes per model in use).
_MAX_PLANS = 1024


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """Where one request goes: the route as sent upstream (its model an alias resolved)
    and the candidate upstreams, first choice first; never empty."""

    route: GeminiRoute
    candidates: tuple[Upstream, ...]
    # True when no candidate needs a redacted request (in-house servers configured with
    # redaction: false): the request is sent as the client wrote it. One candidate that
    # needs redaction makes it False, so a fallback always carries a redacted request.
    unredacted: bool = False
    # models.list: upstreams whose own model lists are added to the answer.
    catalogues: tuple[Upstream, ...] = ()
    # The matched route's low-confidence rule (docs/quality.md); None: the tenant's default.
    confidence: ConfidenceRule | None = None

    def __post_init__(self) -> None:
        if self.unredacted and any(needs_redaction(c) for c in self.candidates):
            raise ValueError("a plan with an upstream that needs redaction cannot skip it")


class Router:
    """Maps a route to its candidate upstreams under the tenant's routing policy.

    The policy (``routes:``, model aliases, the tenant's residency list) comes from the
    request's configuration snapshot; the upstream objects are built at start.
    ``local_embeddings`` answers embedContent and batchEmbedContents for the tenants whose
    policy says ``local_embeddings``, so their text never leaves. A list of candidates never
    mixes upstreams inside the gateway with upstreams outside it: falling back from the
    one to the other would send out what the tenant's policy keeps in.
    """

    def __init__(
        self,
        default: Upstream,
        local_embeddings: Upstream | None = None,
        named: Mapping[str, Upstream] | None = None,
    ) -> None:
        self.default = default
        self.local_embeddings = local_embeddings
        self._by_name: dict[str, Upstream] = {DEFAULT_UPSTREAM: default, **(named or {})}
        # Built once: routing a request without routes allocates little.
        self._remote = (default,)
        self._local = (local_embeddings,) if local_embeddings is not None else self._remote
        self._default_plans: dict[GeminiRoute, RoutePlan] = {}
        self._catalogued = tuple(
            (name, upstream)
            for name, upstream in self._by_name.items()
            if isinstance(upstream, Catalogued)
        )

    def candidates(
        self, route: GeminiRoute, policy: TenantPolicy | None = None, *, tenant: str = ""
    ) -> tuple[Upstream, ...]:
        """The upstreams that may answer ``route`` under the request's tenant ``policy``,
        first choice first; never empty."""
        return self.plan(route, policy, tenant=tenant).candidates

    def plan(
        self,
        route: GeminiRoute,
        policy: TenantPolicy | None = None,
        *,
        tenant: str = "",
        user: str | None = None,
    ) -> RoutePlan:
        """Where ``route`` goes under ``policy`` for ``tenant`` (and ``user``, for splits
        sticky per user); raises ``PermissionDenied`` when the tenant's residency list
        leaves no upstream of its route, ``ServiceUnavailable`` when the route names
        upstreams that are not running (added without a restart)."""
        if (
            self.local_embeddings is not None
            and route.method in _EMBEDDING
            and policy is not None
            and policy.local_embeddings
        ):
            return RoutePlan(route, self._local)
        routing = policy.routing if policy is not None else _NO_ROUTING
        if route.method is GeminiMethod.LIST_MODELS and self._catalogued:
            return self._listing(route, routing)
        if not routing.routes and routing.allowed is None:
            # No routes, no residency list: the default upstream, one plan per route.
            plan = self._default_plans.get(route)
            if plan is None:
                plan = RoutePlan(route, self._remote)
                if len(self._default_plans) < _MAX_PLANS:
                    self._default_plans[route] = plan
            return plan
        matched = routing.route_for(route.model_id, tenant)
        confidence = matched.confidence if matched is not None else None
        if matched is None:
            chain, where = routing.default_chain, "no entry of routes matches, so the default"
        else:
            chain, model, where = matched.chain, matched.model, f"routes.{matched.index}"
            side = matched.side_for(user or tenant if matched.sticky == "user" else tenant)
            if side is not None:
                chain, model = side.chain, side.model
            if model is not None and model != route.model_id:
                route = dataclasses.replace(route, model_id=model)
        if routing.allowed is not None:
            allowed = tuple(name for name in chain if name in routing.allowed)
            if not allowed:
                raise PermissionDenied(
                    "The data-residency policy of your tenant does not allow the upstreams "
                    f"this request would go to ({where}: {', '.join(chain)}; the tenant may "
                    f"reach {', '.join(sorted(routing.allowed)) or 'none'}). Nothing was "
                    "sent. Ask the gateway operator for a route to an allowed upstream."
                )
            chain = allowed
        if chain == (DEFAULT_UPSTREAM,):
            return RoutePlan(route, self._remote, confidence=confidence)
        found = tuple(self._by_name[name] for name in chain if name in self._by_name)
        if not found:
            raise ServiceUnavailable(
                f"The upstreams of this request ({', '.join(chain)}) are configured but not "
                "running: named upstreams take effect after a restart of the gateway."
            )
        if len(found) < len(chain):
            logger.warning(
                "upstreams %s are configured but not running (restart to add them)",
                ", ".join(name for name in chain if name not in self._by_name),
            )
        return RoutePlan(
            route,
            found,
            unredacted=not any(map(needs_redaction, found)),
            confidence=confidence,
        )

    def _listing(self, route: GeminiRoute, routing: RoutingPolicy) -> RoutePlan:
        """models.list: the default chain's list, with the model lists of the upstreams
        that have one and that the tenant may reach; theirs alone if it may reach only them."""
        allowed = routing.allowed
        chain = tuple(
            self._by_name[name]
            for name in routing.default_chain
            if name in self._by_name and (allowed is None or name in allowed)
        )
        extra = tuple(
            upstream
            for name, upstream in self._catalogued
            if (allowed is None or name in allowed) and upstream not in chain
        )
        if not chain:
            if not extra:
                raise PermissionDenied(
                    "The data-residency policy of your tenant allows no upstream with a model "
                    "list. Nothing was sent."
                )
            chain, extra = (extra[0],), extra[1:]
        return RoutePlan(route, chain, catalogues=extra)

    @property
    def upstreams(self) -> tuple[Upstream, ...]:
        """Every configured upstream."""
        remote = tuple(self._by_name.values())
        if self.local_embeddings is None:
            return remote
        return (*remote, self.local_embeddings)
