"""The application factory: builds the pipeline in the lifespan, nothing at import time."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from localgate.app.drain import Drain
from localgate.app.hangup import ReloadOnHangup
from localgate.app.operations import (
    OPERATIONS,
    healthz,
    metrics,
    openai_openapi,
    openapi,
    readyz,
)
from localgate.app.vector import VectorLayer, needs_vector_layer
from localgate.app.worker import WorkerSlot
from localgate.audit.trail import AuditTrail
from localgate.config import DEFAULT_UPSTREAM, NamedUpstreamSettings, Settings
from localgate.frontdoor.endpoint import GatewayServices, GeminiEndpoint
from localgate.frontdoor.openai_endpoint import OpenAIEndpoint
from localgate.frontdoor.protocol import gateway_protocol
from localgate.frontdoor.tls import ServerTls
from localgate.gemini.routes import GeminiMethod
from localgate.identity import open_key_store
from localgate.identity.stage import IdentityStage
from localgate.limits import TenantLimiter
from localgate.limits.estimate import estimate_tokens
from localgate.observability import AccessLog, GatewayMetrics
from localgate.observability.host import HostMetrics
from localgate.observability.siblings import Siblings
from localgate.openai.routes import is_openai_path
from localgate.pipeline import Pipeline
from localgate.pipeline.stages import NoAudit, NoCache, NoRetrieval
from localgate.policy import ConfigReloader, PolicySnapshot
from localgate.policy.host_reload import HostReload, WorkerConfig
from localgate.quality import QualityStage
from localgate.redaction import native
from localgate.redaction.stage import PolicyRedaction, signature_seal
from localgate.requestid import RequestIdMiddleware
from localgate.telemetry import open_tracing, trace_config
from localgate.upstream import GeminiUpstream, Router, Upstream, UpstreamDispatcher
from localgate.upstream.egress import egress_for
from localgate.upstream.gemini import open_session
from localgate.upstream.openai_compat import OpenAICompatUpstream

if TYPE_CHECKING:
    # Imported only with limits.backend: redis (it needs the Redis client).
    from localgate.upstream.shared_breakers import SharedBreakers
from localgate.vectorstore.embedders import build_embedder

__all__ = ["create_app", "server_options"]

logger = logging.getLogger("localgate")


def create_app(
    settings: Settings,
    source: Path | None = None,
    *,
    pid_file: Path | None = None,
    drain: Drain | None = None,
    tls: ServerTls | None = None,
    worker: WorkerSlot | None = None,
    on_started: Callable[[Mapping[str, Any]], None] | None = None,
) -> ASGIApp:
    """A gateway for ``settings``; resources open and close with the app's lifespan.

    ``source`` is the configuration file the settings came from: a reload (SIGHUP,
    ``localgate reload``) reads it again. ``pid_file`` is written while the gateway runs
    and can be reloaded by SIGHUP, so that ``localgate reload`` finds it. ``drain`` says
    when the server has started draining (``/readyz`` then answers 503). ``tls`` is the
    server's certificate when it serves HTTPS: its metrics are exported, and a reload
    (SIGHUP) also looks at its files. ``worker``: this process is one of several serving
    the port (``/metrics`` then sums them all). ``on_started`` is given the lifespan's state
    once everything is built (the admin API beside it reads upstreams and reloads through
    it).
    """
    draining = drain or Drain()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        # Everything opened is closed when the gateway stops, in the reverse order, and so
        # is what was opened before a failure to start: nothing is left half-open.
        async with contextlib.AsyncExitStack() as stack:
            keys = open_key_store(settings)
            stack.callback(keys.close)
            access_log = AccessLog(settings.access_log_path)
            access_log.start()
            stack.push_async_callback(access_log.close)
            upstream_settings = settings.upstream
            egress = egress_for(upstream_settings.base_url, upstream_settings, environ=os.environ)
            logger.info("upstream %s: %s", DEFAULT_UPSTREAM, egress.describe())
            logger.info("detection core: %s", native.status().reason)
            session = open_session(
                upstream_settings.max_connections,
                upstream_settings.connect_timeout_s,
                upstream_settings.timeout_s,
                egress,
            )
            stack.push_async_callback(session.close)
            upstream = GeminiUpstream(
                name=DEFAULT_UPSTREAM,
                base_url=upstream_settings.base_url,
                api_key=settings.upstream_api_key,
                session=session,
                read_timeout_s=upstream_settings.timeout_s,
            )
            named, closers = _named_upstreams(settings)
            for close in closers:
                stack.push_async_callback(close)
            metrics = GatewayMetrics()
            metrics.server_certificate.source = tls
            trace_settings = trace_config(settings.telemetry, os.environ)
            tracing = open_tracing(trace_settings) if trace_settings is not None else None
            if tracing is not None:
                stack.push_async_callback(asyncio.to_thread, tracing.shutdown)
            reloader = ConfigReloader(
                PolicySnapshot.build(settings, source=str(source) if source else None),
                source,
                metrics,
            )
            vector = VectorLayer.open(settings, metrics)
            if vector is not None:
                stack.push_async_callback(vector.close)
            if vector is None:
                reloader.check_before_applying(_vector_layer_needs_restart)
            router = Router(
                default=upstream,
                local_embeddings=vector.local_embeddings if vector else None,
                named=named,
            )
            for candidate in router.upstreams:
                if candidate.ready is not None:
                    logger.warning("not ready to forward: %s", candidate.ready)
            trail = AuditTrail.open(settings, metrics) if settings.proxy.enable_audit else None
            if trail is not None:
                stack.push_async_callback(trail.close)
            redaction = PolicyRedaction(metrics, signature_seal(settings))
            # Built now, and again for each reload before it is swapped in: no request pays
            # for building a detector.
            reloader.prepare_with(redaction.prepare)
            # Limits: their values come with each request's policy; the backend is opened once.
            limiter = TenantLimiter.open(settings.limits, metrics)
            stack.push_async_callback(limiter.close)
            dispatcher = UpstreamDispatcher(
                router,
                retries=settings.retries,
                breaker=settings.circuit_breaker,
                metrics=metrics,
            )
            shared_breakers = _share_breakers(settings, dispatcher)
            if shared_breakers is not None:
                stack.push_async_callback(shared_breakers.close)
            # Drift and confidence (docs/quality.md); prompt drift embeds with an embedder of
            # its own, built in its worker thread only when configured.
            quality = QualityStage(
                settings.quality,
                metrics,
                embedder=lambda: build_embedder(settings.embeddings),
                state_path=settings.quality_state_path,
            )
            stack.push_async_callback(quality.close)
            pipeline = Pipeline(
                identity=IdentityStage(keys, lambda: reloader.current, settings.server),
                limits=limiter,
                redaction=redaction,
                retrieval=vector.retrieval if vector else NoRetrieval(),
                cache=vector.cache if vector else NoCache(),
                audit=trail.stage if trail is not None else NoAudit(),
                dispatcher=dispatcher,
                access_log=access_log,
                metrics=metrics,
                quality=quality,
            )
            services = GatewayServices(
                pipeline=pipeline,
                metrics=metrics,
                max_body_bytes=settings.server.max_body_bytes,
                tracing=tracing,
                openai_drop_unsupported=settings.openai.drop_unsupported,
            )
            if trail is not None:
                await trail.start()
            await quality.start()
            # Everything built so far lives as long as the process: move it out of the
            # cyclic collector's way, so full collections stay short under load.
            gc.collect()
            gc.freeze()
            # A young-generation collection every 20,000 allocations instead of 700: with
            # many requests in flight, each one scanned every live young object for almost
            # little (reference counting frees most per-request garbage); 2% fewer instructions per
            # request at 64 in flight.
            gc.set_threshold(20_000, 10, 10)
            hangup = ReloadOnHangup(reloader, pid_file, also=tls.check if tls else None).install()
            stack.callback(hangup.close)
            host_metrics = host_reload = None
            if worker is not None:
                # The host-wide views: /metrics sums every worker's, and a reload (the admin
                # API's, `localgate reload`'s through /readyz) reports every worker's outcome.
                siblings = Siblings(worker.metrics_dir, worker.index)
                host_metrics = HostMetrics(metrics.registry, siblings)
                index, pid = worker.index, os.getpid()
                host_reload = HostReload(
                    lambda: WorkerConfig.of(reloader, index, pid),
                    siblings,
                    worker.count,
                    worker.supervisor_pid,
                )
                await siblings.start()
                stack.push_async_callback(siblings.close)
            state = {
                "services": services,
                "keys": keys,
                "router": router,
                "vector": vector,
                "audit": trail.readiness if trail is not None else None,
                "config": reloader,
                "drain": draining,
                "tls": tls,
                "worker": worker,
                "host_metrics": host_metrics,
                "host_reload": host_reload,
            }
            if on_started is not None:
                on_started(state)
            yield state

    endpoint = GeminiEndpoint()
    starlette = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
            Route("/openapi/openai.json", openai_openapi, methods=["GET"]),
            Mount("/", app=endpoint),
        ],
        lifespan=lifespan,
    )
    return Dispatcher(RequestIdMiddleware(starlette), endpoint, OpenAIEndpoint())


def server_options(settings: Settings) -> dict[str, Any]:
    """How uvicorn runs the gateway (besides host, port and logging)."""
    trusted = settings.server.trusted_proxies
    return {
        "access_log": False,  # the gateway writes its own
        "lifespan": "on",
        # Requests and streams in flight get this long to finish after a SIGTERM.
        "timeout_graceful_shutdown": settings.server.drain_timeout_s,
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


def _named_upstreams(
    settings: Settings,
) -> tuple[dict[str, Upstream], list[Callable[[], Awaitable[None]]]]:
    """The ``upstreams:`` section's upstreams, each with a pooled session of its own (its
    timeouts and connection limit); their key pools come from the loaded settings."""
    upstreams: dict[str, Upstream] = {}
    closers: list[Callable[[], Awaitable[None]]] = []
    for name, config in settings.upstreams.items():
        egress = egress_for(
            config.url, config, settings.upstream, os.environ, where=f"upstreams.{name}"
        )
        logger.info("upstream %s: %s", name, egress.describe())
        session = open_session(
            config.max_connections, config.connect_timeout_s, config.timeout_s, egress
        )
        closers.append(session.close)
        if config.kind == "openai":
            upstreams[name] = OpenAICompatUpstream(
                name=name,
                base_url=config.url,
                session=session,
                read_timeout_s=config.timeout_s,
                estimate=_count_tokens,
                keys=settings.upstream_keys.get(name, ()),
                key_cooldown_s=config.key_cooldown_s,
                models=config.models,
                redaction=config.redaction,
                probe_interval_s=config.probe_interval_s,
            )
            continue
        if config.kind == "vertex" and config.credentials_file is not None:
            upstreams[name] = _vertex_upstream(name, config, config.credentials_file, session)
            continue
        upstreams[name] = GeminiUpstream(
            name=name,
            base_url=config.url,
            api_key=None,
            session=session,
            read_timeout_s=config.timeout_s,
            keys=settings.upstream_keys.get(name, ()),
            key_cooldown_s=config.key_cooldown_s,
            key_source=f"upstreams.{name}.api_key_env or upstreams.{name}.api_key_file",
        )
    return upstreams, closers


def _count_tokens(body: Any) -> int:
    """countTokens on an upstream that cannot count: the limits' own estimate."""
    return estimate_tokens(GeminiMethod.COUNT_TOKENS, body, 0)


def _vertex_upstream(
    name: str, config: NamedUpstreamSettings, credentials_file: Path, session: Any
) -> Upstream:
    """A Vertex AI upstream; google-auth is imported only when one is configured."""
    from localgate.upstream.vertex import ServiceAccountTokens, VertexPaths

    tokens = ServiceAccountTokens(name, credentials_file)
    return GeminiUpstream(
        name=name,
        base_url=config.url,
        api_key=None,
        session=session,
        read_timeout_s=config.timeout_s,
        authorize=tokens.headers,
        path=VertexPaths(name, config.project or "", config.location or ""),
        not_ready=lambda: tokens.problem,
    )


def _vector_layer_needs_restart(new: Settings) -> list[str]:
    if not needs_vector_layer(new):
        return []
    return [
        "cache, rag or local_embeddings: now used, but the vector store was not opened at "
        "start (nothing used it); takes effect after a restart"
    ]


class Dispatcher:
    """Sends model traffic straight to the endpoint of its dialect (OpenAI's under its
    bases, Gemini's for every other path); everything else to Starlette.

    The model routes are the hot path: they skip Starlette's router and exception
    middleware (the endpoints render their own errors and give requests their ids).
    Health, readiness, metrics and the lifespan go through Starlette.
    """

    def __init__(
        self, starlette: ASGIApp, endpoint: GeminiEndpoint, openai: OpenAIEndpoint
    ) -> None:
        self.starlette = starlette
        self.endpoint = endpoint
        self.openai = openai

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPERATIONS:
            if is_openai_path(scope["path"]):
                await self.openai(scope, receive, send)
            else:
                await self.endpoint(scope, receive, send)
        else:
            await self.starlette(scope, receive, send)


def _share_breakers(settings: Settings, dispatcher: UpstreamDispatcher) -> SharedBreakers | None:
    """With the limits in Redis, the circuit breakers are shared there too."""
    limits, breaker = settings.limits, settings.circuit_breaker
    if limits.backend != "redis" or not limits.redis_url or not breaker.enabled:
        return None
    # Imported only when used: it needs the Redis client.
    from localgate.upstream.shared_breakers import SharedBreakers

    shared = SharedBreakers(
        limits.redis_url,
        lambda: dispatcher.breakers,
        breaker,
        prefix=f"{limits.key_prefix}breaker:",
    )
    dispatcher.share_breakers(shared)
    shared.start()
    return shared
