"""The identity stage: the presented key becomes the request's principal and policy, or it is
refused."""

from __future__ import annotations

from collections.abc import Callable

from localgate.exchange.context import RequestContext
from localgate.identity.keys import KeyStore
from localgate.policy.snapshot import PolicySnapshot

__all__ = ["IdentityStage"]


class IdentityStage:
    """Key → tenant → the tenant's policy. Fails closed: no principal, no further stage.

    The policy is read from the snapshot current when the request is authenticated; the
    request keeps it to the end, whatever a reload swaps in meanwhile.
    """

    def __init__(self, keys: KeyStore, policies: Callable[[], PolicySnapshot]) -> None:
        self.keys = keys
        self._policies = policies

    def authenticate(self, ctx: RequestContext, credential: str | None) -> None:
        """Set ``ctx.principal`` and ``ctx.policy`` or raise ``Unauthenticated``/
        ``PermissionDenied``."""
        principal = ctx.principal = self.keys.authenticate(credential)
        ctx.policy = self._policies().for_tenant(principal.tenant)
