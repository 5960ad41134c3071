"""Router: which upstream serves a request."""

from __future__ import annotations

from collections.abc import Callable

from localgate.exchange.principal import Principal
from localgate.gemini.routes import GeminiMethod, GeminiRoute
from localgate.upstream.base import Upstream

__all__ = ["Router"]

_EMBEDDING = frozenset({GeminiMethod.EMBED_CONTENT, GeminiMethod.BATCH_EMBED_CONTENTS})


class Router:
    """Maps a route to an upstream: the default Gemini upstream, or the local embedder.

    ``local_embeddings`` answers embedContent and batchEmbedContents for the tenants
    ``embeds_locally`` names, so their text never leaves.
    """

    def __init__(
        self,
        default: Upstream,
        local_embeddings: Upstream | None = None,
        embeds_locally: Callable[[str], bool] | None = None,
    ) -> None:
        self.default = default
        self.local_embeddings = local_embeddings
        self._embeds_locally = embeds_locally or (lambda tenant: False)

    def route(self, route: GeminiRoute, principal: Principal | None = None) -> Upstream:
        """The upstream for ``route`` called by ``principal``."""
        if (
            self.local_embeddings is not None
            and route.method in _EMBEDDING
            and principal is not None
            and self._embeds_locally(principal.tenant)
        ):
            return self.local_embeddings
        return self.default

    @property
    def upstreams(self) -> tuple[Upstream, ...]:
        """Every configured upstream."""
        if self.local_embeddings is None:
            return (self.default,)
        return (self.default, self.local_embeddings)
