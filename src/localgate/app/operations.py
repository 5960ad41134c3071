"""The operations routes: /healthz, /readyz and /metrics."""

from __future__ import annotations

import os
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from localgate.app.drain import Drain
from localgate.app.vector import VectorLayer
from localgate.app.worker import WorkerSlot
from localgate.audit.readiness import AuditReadiness
from localgate.errors import LocalgateError
from localgate.frontdoor.endpoint import GatewayServices
from localgate.frontdoor.tls import ServerTls
from localgate.gemini.openapi import openapi_document
from localgate.identity import KeyStore
from localgate.observability.host import HostMetrics
from localgate.observability.metrics import CONTENT_TYPE_LATEST
from localgate.openai.openapi import openai_document
from localgate.policy import ConfigReloader
from localgate.policy.host_reload import HostReload
from localgate.upstream import Router
from localgate.upstream.base import Catalogued

__all__ = ["OPERATIONS", "healthz", "metrics", "openai_openapi", "openapi", "readyz"]

# The paths of the routes below.
OPERATIONS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json", "/openapi/openai.json"})


async def healthz(request: Request) -> Response:
    """The process is alive; with several workers, which one answered."""
    worker: WorkerSlot | None = request.state.worker
    if worker is None:
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": "ok", "worker": worker.index, "pid": os.getpid()})


async def readyz(request: Request) -> Response:
    """The stages a request needs can work: state store, audit trail, every upstream."""
    checks: dict[str, str] = {}
    keys: KeyStore = request.state.keys
    try:
        keys.check()
        checks["state_store"] = "ok"
    except LocalgateError as exc:
        checks["state_store"] = exc.message
    audit: AuditReadiness | None = request.state.audit
    if audit is not None:
        checks["audit_trail"] = await audit.problem() or "ok"
    router: Router = request.state.router
    for upstream in router.upstreams:
        checks[f"upstream:{upstream.name}"] = upstream.ready or "ok"
    drain: Drain = request.state.drain
    if drain.draining:
        # Stopping (SIGTERM): still answering, but the load balancer should send elsewhere.
        checks["server"] = "draining: the gateway is shutting down"
    ready = all(value == "ok" for value in checks.values())
    for upstream in router.upstreams:
        if isinstance(upstream, Catalogued) and checks.get(f"upstream:{upstream.name}") == "ok":
            # Shown, not a reason to be taken out of a load balancer: an in-house server
            # that is down fails its own requests over, not the gateway's others.
            problem = await upstream.probe()
            if problem is not None:
                checks[f"upstream:{upstream.name}"] = f"degraded: {problem}"
    reloader: ConfigReloader = request.state.config
    # Shown, not a reason to be taken out of a load balancer: a rejected reload leaves
    # the last good configuration running.
    checks["config"] = _config_check(reloader)
    tls: ServerTls | None = request.state.tls
    if tls is not None:
        # Shown, not a reason to be taken out: a failed reload keeps the last good certificate.
        checks["tls"] = (
            "ok"
            if tls.last_error is None
            else f"last certificate reload failed, still serving the previous one: {tls.last_error}"
        )
    vector: VectorLayer | None = request.state.vector
    if vector is not None:
        # Shown, but not a reason to take the gateway out of a load balancer: without
        # the store, requests are forwarded (the cache misses).
        problem = await vector.store.check()
        checks["vector_store"] = f"degraded: {problem}" if problem else "ok"
    services: GatewayServices = request.state.services
    worker: WorkerSlot | None = request.state.worker
    host: HostReload | None = request.state.host_reload
    every_worker: dict[str, Any] = {}
    if host is not None and request.query_params.get("workers") == "all":
        # Asked for (`localgate reload` does): every worker's configuration, from its
        # siblings; a probe does not wait for them.
        configs = await host.configs()
        every_worker = {
            "worker_count": host.count,
            "workers": [configs[index].as_dict() for index in sorted(configs)],
        }
    return JSONResponse(
        {
            "status": "ready" if ready else ("draining" if drain.draining else "not ready"),
            **({"worker": worker.index} if worker is not None else {}),
            "checks": checks,
            "config": _config_detail(reloader),
            **every_worker,
            # Shown, not a reason to be taken out of a load balancer: requests fall back
            # to other upstreams, or get a 503 naming the open one.
            "circuits": services.pipeline.dispatcher.circuits(),
            **({"tls": _tls_detail(tls)} if tls is not None else {}),
        },
        status_code=200 if ready else 503,
    )


def _tls_detail(tls: ServerTls) -> dict[str, Any]:
    """The server certificate being served, and its reloads."""
    current = tls.current
    return {
        "subject": current.subject,
        "not_after": current.not_after.isoformat(),
        "sha256": current.fingerprint,
        "reloads": tls.reloads,
        "reload_failures": tls.reload_failures,
    }


def _config_check(reloader: ConfigReloader) -> str:
    last = reloader.last
    if last is None or last.applied:
        return "ok"
    return (
        f"last reload rejected ({len(last.problems)} problem(s)); running version "
        f"{last.version} ({last.hash})"
    )


def _config_detail(reloader: ConfigReloader) -> dict[str, Any]:
    """Which configuration runs, and what the last reload did (for ``localgate reload``)."""
    current = reloader.current
    return {
        "version": current.version,
        "hash": current.hash,
        "source": current.source,
        "reloads": reloader.attempts,
        "last_reload": reloader.last.as_dict() if reloader.last is not None else None,
    }


async def openapi(request: Request) -> Response:
    """The data plane's OpenAPI document (no key needed: it holds no tenant data)."""
    return JSONResponse(openapi_document())


async def openai_openapi(request: Request) -> Response:
    """The OpenAI-compatible routes' OpenAPI document (no key needed either)."""
    return JSONResponse(openai_document())


async def metrics(request: Request) -> Response:
    """Prometheus text exposition; with several workers, the sum over all of them."""
    host: HostMetrics | None = request.state.host_metrics
    if host is not None:
        return Response(await host.render(), media_type=CONTENT_TYPE_LATEST)
    services: GatewayServices = request.state.services
    return Response(services.metrics.render(), media_type=CONTENT_TYPE_LATEST)
