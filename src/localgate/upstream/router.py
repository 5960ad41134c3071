"""Router: which upstreams may serve a request, in the order to try them."""

from __future__ import annotations

from localgate.gemini.routes import GeminiMethod, GeminiRoute
from localgate.policy.snapshot import TenantPolicy
from localgate.upstream.base import Upstream

__all__ = ["Router"]

_EMBEDDING = frozenset({GeminiMethod.EMBED_CONTENT, GeminiMethod.BATCH_EMBED_CONTENTS})


class Router:
    """Maps a route to its candidate upstreams: the default Gemini upstream, or the local
    embedder.

    ``local_embeddings`` answers embedContent and batchEmbedContents for the tenants whose
    policy says ``local_embeddings``, so their text never leaves. A list of candidates never
    mixes upstreams inside the gateway with upstreams outside it: falling back from the
    one to the other would send out what the tenant's policy keeps in.
    """

    def __init__(
        self,
        default: Upstream,
        local_embeddings: Upstream | None = None,
    ) -> None:
        self.default = default
        self.local_embeddings = local_embeddings
        # Built once: routing a request allocates nothing.
        self._remote = (default,)
        self._local = (local_embeddings,) if local_embeddings is not None else self._remote

    def candidates(
        self, route: GeminiRoute, policy: TenantPolicy | None = None
    ) -> tuple[Upstream, ...]:
        """The upstreams that may answer ``route`` under the request's tenant ``policy``,
        first choice first (one today); never empty."""
        if (
            self.local_embeddings is not None
            and route.method in _EMBEDDING
            and policy is not None
            and policy.local_embeddings
        ):
            return self._local
        return self._remote

    @property
    def upstreams(self) -> tuple[Upstream, ...]:
        """Every configured upstream."""
        if self.local_embeddings is None:
            return (self.default,)
        return (self.default, self.local_embeddings)
