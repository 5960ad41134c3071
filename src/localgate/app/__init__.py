"""The application factory: builds the pipeline in the lifespan, nothing at import time."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from localgate.app.vector import VectorLayer
from localgate.audit.readiness import AuditReadiness
from localgate.audit.trail import AuditTrail
from localgate.config import Settings
from localgate.errors import LocalgateError
from localgate.frontdoor.endpoint import GatewayServices, GeminiEndpoint
from localgate.frontdoor.protocol import gateway_protocol
from localgate.identity import SqliteKeyStore
from localgate.identity.stage import IdentityStage
from localgate.observability import AccessLog, GatewayMetrics
from localgate.observability.metrics import CONTENT_TYPE_LATEST
from localgate.pipeline import Pipeline
from localgate.pipeline.stages import NoAudit, NoCache, NoLimits, NoRetrieval
from localgate.redaction.stage import PolicyRedaction, signature_seal
from localgate.requestid import RequestIdMiddleware
from localgate.upstream import GeminiUpstream, Router, UpstreamDispatcher
from localgate.upstream.gemini import open_session

__all__ = ["create_app", "server_options"]

logger = logging.getLogger("localgate")


def create_app(settings: Settings) -> ASGIApp:
    """A gateway for ``settings``; resources open and close with the app's lifespan."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        keys = SqliteKeyStore(settings.state_db_path)
        access_log = AccessLog(settings.access_log_path)
        access_log.start()
        upstream_settings = settings.upstream
        session = open_session(
            upstream_settings.max_connections,
            upstream_settings.connect_timeout_s,
            upstream_settings.timeout_s,
        )
        upstream = GeminiUpstream(
            name="gemini",
            base_url=upstream_settings.base_url,
            api_key=settings.upstream_api_key,
            session=session,
            read_timeout_s=upstream_settings.timeout_s,
        )
        metrics = GatewayMetrics()
        vector = VectorLayer.open(settings, metrics)
        router = Router(
            default=upstream,
            local_embeddings=vector.local_embeddings if vector else None,
            embeds_locally=settings.local_embeddings_for,
        )
        for candidate in router.upstreams:
            if candidate.ready is not None:
                logger.warning("not ready to forward: %s", candidate.ready)
        trail = AuditTrail.open(settings, metrics) if settings.proxy.enable_audit else None
        pipeline = Pipeline(
            identity=IdentityStage(keys),
            limits=NoLimits(),
            redaction=PolicyRedaction(settings, metrics, signature_seal(settings)),
            retrieval=vector.retrieval if vector else NoRetrieval(),
            cache=vector.cache if vector else NoCache(),
            audit=trail.stage if trail is not None else NoAudit(),
            dispatcher=UpstreamDispatcher(router),
            access_log=access_log,
            metrics=metrics,
        )
        services = GatewayServices(
            pipeline=pipeline,
            metrics=metrics,
            max_body_bytes=settings.server.max_body_bytes,
        )
        if trail is not None:
            await trail.start()
        # Everything built so far lives as long as the process: move it out of the
        # cyclic collector's way, so full collections stay short under load.
        gc.collect()
        gc.freeze()
        # A young-generation collection every 20,000 allocations instead of 700: with
        # many requests in flight, each one scanned every live young object for almost
        # little (reference counting frees most per-request garbage); 2% fewer instructions per
        # request at 64 in flight.
        gc.set_threshold(20_000, 10, 10)
        try:
            yield {
                "services": services,
                "keys": keys,
                "router": router,
                "vector": vector,
                "audit": trail.readiness if trail is not None else None,
            }
        finally:
            if vector is not None:
                await vector.close()
            if trail is not None:
                await trail.close()
            await session.close()
            await access_log.close()
            keys.close()

    endpoint = GeminiEndpoint()
    starlette = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Mount("/", app=endpoint),
        ],
        lifespan=lifespan,
    )
    return Dispatcher(RequestIdMiddleware(starlette), endpoint)


def server_options(settings: Settings) -> dict[str, Any]:
    """How uvicorn runs the gateway (besides host, port and logging)."""
    trusted = settings.server.trusted_proxies
    return {
        "access_log": False,  # the gateway writes its own
        "lifespan": "on",
        "timeout_graceful_shutdown": 30,
        # uvicorn's httptools protocol, with header and body deadlines, a header size cap,
        # a pending-connection cap per address and Gemini envelopes for malformed requests.
        "http": gateway_protocol(settings.server),
        "timeout_keep_alive": settings.server.keep_alive_timeout_s,
        # No route speaks WebSocket: an upgrade request is answered as plain HTTP.
        "ws": "none",
        # X-Forwarded-For is believed only from the reverse proxies named in the config:
        # anyone else could write any client address into the access log and audit trail.
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": trusted or None,
    }


async def healthz(request: Request) -> Response:
    """The process is alive."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """The stages a request needs can work: state store, audit trail, every upstream."""
    checks: dict[str, str] = {}
    keys: SqliteKeyStore = request.state.keys
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
    ready = all(value == "ok" for value in checks.values())
    vector: VectorLayer | None = request.state.vector
    if vector is not None:
        # Shown, but not a reason to take the gateway out of a load balancer: without
        # the store, requests are forwarded (the cache misses).
        problem = await vector.store.check()
        checks["vector_store"] = f"degraded: {problem}" if problem else "ok"
    return JSONResponse(
        {"status": "ready" if ready else "not ready", "checks": checks},
        status_code=200 if ready else 503,
    )


async def metrics(request: Request) -> Response:
    """Prometheus text exposition."""
    services: GatewayServices = request.state.services
    return Response(services.metrics.render(), media_type=CONTENT_TYPE_LATEST)


class Dispatcher:
    """Sends Gemini traffic straight to the endpoint; everything else to Starlette.

    The model routes are the hot path: they skip Starlette's router and exception
    middleware (the endpoint renders its own errors and gives requests their ids).
    Health, readiness, metrics and the lifespan go through Starlette.
    """

    def __init__(self, starlette: ASGIApp, endpoint: GeminiEndpoint) -> None:
        self.starlette = starlette
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in _OPERATIONS:
            await self.endpoint(scope, receive, send)
        else:
            await self.starlette(scope, receive, send)


_OPERATIONS = frozenset({"/healthz", "/readyz", "/metrics"})
