"""What the admin API sees of the gateway running in the same process.

``localgate serve`` hands the data plane's lifespan state to a ``GatewayLink`` once the
gateway has started (``create_app(..., on_started=link.attach)``); the admin API then
reads the upstreams and their circuit breakers and asks the configuration reloader for a
reload, on the event loop both servers share. With several workers (the admin API runs in
worker 0), a reload goes to every worker, through their supervisor (``host_reload``).
Without a gateway in the process (the admin app on its own, in tests) these operations
answer that nothing is running.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localgate.errors import FailedPrecondition
from localgate.limits import TenantLimiter
from localgate.policy.host_reload import HostReload
from localgate.policy.reload import ConfigReloader
from localgate.upstream.dispatcher import UpstreamDispatcher
from localgate.upstream.router import Router

__all__ = ["GatewayLink"]


class GatewayLink:
    """The running gateway's reloader, router and dispatcher, once it has started (and,
    with several workers, the reload of all of them)."""

    def __init__(self) -> None:
        self.reloader: ConfigReloader | None = None
        self.host_reload: HostReload | None = None
        self.router: Router | None = None
        self.dispatcher: UpstreamDispatcher | None = None
        self.limiter: TenantLimiter | None = None  # its limits' counters

    def attach(self, state: Mapping[str, Any]) -> None:
        """Take what the admin API needs from the data plane's lifespan state."""
        reloader, router = state.get("config"), state.get("router")
        services = state.get("services")
        pipeline = getattr(services, "pipeline", None)
        dispatcher = getattr(pipeline, "dispatcher", None)
        self.reloader = reloader if isinstance(reloader, ConfigReloader) else None
        host_reload = state.get("host_reload")
        self.host_reload = host_reload if isinstance(host_reload, HostReload) else None
        self.router = router if isinstance(router, Router) else None
        self.dispatcher = dispatcher if isinstance(dispatcher, UpstreamDispatcher) else None
        limiter = getattr(pipeline, "limits", None)
        self.limiter = limiter if isinstance(limiter, TenantLimiter) else None

    def running(self) -> tuple[ConfigReloader, Router, UpstreamDispatcher]:
        """The gateway's parts; ``FailedPrecondition`` if no gateway runs in this process."""
        if self.reloader is None or self.router is None or self.dispatcher is None:
            raise FailedPrecondition(
                "No gateway runs in this process: the admin API shows upstreams and reloads "
                "the configuration only beside a gateway started by 'localgate serve'."
            )
        return self.reloader, self.router, self.dispatcher
