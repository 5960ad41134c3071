"""The identity stage: the presented key (or client certificate) becomes the request's
principal and policy, or it is refused."""

from __future__ import annotations

from collections.abc import Callable

from localgate.config import ServerSettings
from localgate.exchange.context import RequestContext
from localgate.exchange.principal import ClientCertificate
from localgate.identity.certificates import CertificateMap
from localgate.identity.keys import KeyStore
from localgate.policy.snapshot import PolicySnapshot

__all__ = ["IdentityStage"]


class IdentityStage:
    """Key and/or certificate → tenant → the tenant's policy. Fails closed: no principal,
    no further stage.

    The policy is read from the snapshot current when the request is authenticated; the
    request keeps it to the end, whatever a reload swaps in meanwhile.
    """

    def __init__(
        self,
        keys: KeyStore,
        policies: Callable[[], PolicySnapshot],
        server: ServerSettings | None = None,
    ) -> None:
        self.keys = keys
        self._policies = policies
        # The server section the gateway started with (mTLS on or off, required or not):
        # it needs a restart to change; None: the snapshot's (tests).
        self._server = server
        # The certificate map of the last snapshot seen, rebuilt when a reload swaps it.
        self._certificates: tuple[PolicySnapshot, CertificateMap] | None = None

    def authenticate(
        self,
        ctx: RequestContext,
        credential: str | None,
        certificate: ClientCertificate | None = None,
    ) -> None:
        """Set ``ctx.principal`` and ``ctx.policy`` or raise ``Unauthenticated``/
        ``PermissionDenied``."""
        snapshot = self._policies()
        certificates = self._certificate_map(snapshot)
        if certificates is None and certificate is None:
            principal = self.keys.authenticate(credential)  # no mTLS anywhere: keys only
        else:
            principal = self._map(snapshot).authenticate(self.keys, credential, certificate)
        ctx.principal = principal
        ctx.policy = snapshot.for_tenant(principal.tenant)

    def _certificate_map(self, snapshot: PolicySnapshot) -> CertificateMap | None:
        server = self._server or snapshot.settings.server
        if server.client_ca_file is None:
            return None
        return self._map(snapshot)

    def _map(self, snapshot: PolicySnapshot) -> CertificateMap:
        cached = self._certificates
        if cached is not None and cached[0] is snapshot:
            return cached[1]
        built = CertificateMap.build(snapshot.settings, self._server)
        self._certificates = (snapshot, built)
        return built
