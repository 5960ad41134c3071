"""The identity stage: the presented key becomes the request's principal, or it is refused."""

from __future__ import annotations

from localgate.exchange.context import RequestContext
from localgate.identity.keys import KeyStore

__all__ = ["IdentityStage"]


class IdentityStage:
    """Key → tenant. Fails closed: no principal, no further stage."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys

    def authenticate(self, ctx: RequestContext, credential: str | None) -> None:
        """Set ``ctx.principal`` or raise ``Unauthenticated``/``PermissionDenied``."""
        ctx.principal = self.keys.authenticate(credential)
