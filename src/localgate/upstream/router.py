"""Router: which upstream serves a request."""

from __future__ import annotations

from localgate.frontdoor.routes import GeminiRoute
from localgate.upstream.base import Upstream

__all__ = ["Router"]


class Router:
    """Maps a route to an upstream; this version has a single default Gemini upstream."""

    def __init__(self, default: Upstream) -> None:
        self.default = default

    def route(self, route: GeminiRoute) -> Upstream:
        """The upstream for ``route``."""
        return self.default

    @property
    def upstreams(self) -> tuple[Upstream, ...]:
        """Every configured upstream."""
        return (self.default,)
