"""The admin API's application factory: its services open and close with its lifespan."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from localgate.admin.audit import AuditAdmin
from localgate.admin.audit_search import AuditSearch
from localgate.admin.keys import KeyAdmin
from localgate.admin.operator_stores import open_operator_store
from localgate.adminapi.console import console_routes
from localgate.adminapi.console_audit import audit_console_routes
from localgate.adminapi.console_pages import page_routes
from localgate.adminapi.link import GatewayLink
from localgate.adminapi.oidc import OidcLogin, PendingLogins
from localgate.adminapi.operations import OPERATIONS
from localgate.adminapi.routing import (
    AdminRoutes,
    http_exception,
    json_response,
    openapi_document,
)
from localgate.adminapi.services import AdminServices
from localgate.adminapi.sessions import Clock, LoginThrottle, SessionStore
from localgate.adminapi.sessions_postgres import (
    PostgresLoginThrottle,
    PostgresPendingLogins,
    PostgresSessionStore,
)
from localgate.adminapi.trail import AdminTrail
from localgate.adminapi.verifying import VerificationJobs
from localgate.config import Settings
from localgate.errors import ServiceUnavailable
from localgate.state.postgres import StateConnection, StateDatabaseUnavailable

__all__ = ["admin_openapi", "create_admin_app"]


def admin_openapi() -> dict[str, Any]:
    """The admin API's OpenAPI 3.1 document (served at /admin/api/openapi.json)."""
    return openapi_document(OPERATIONS)


def create_admin_app(
    settings: Settings,
    source: Path | None = None,
    *,
    clock: Clock = time.time,
    link: GatewayLink | None = None,
) -> Starlette:
    """The admin API for ``settings``; ``clock`` times sessions and login throttling;
    ``link`` is the gateway running beside it, if any."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        with ExitStack() as opened:
            # Each closed at shutdown, or at once if a later one cannot open (a database
            # connection and its poller thread must not outlive a failed start).
            operators = opened.enter_context(open_operator_store(settings))
            keys = opened.enter_context(KeyAdmin.open(settings))
            trail = AdminTrail.open(settings)
            opened.callback(trail.close)
            store_thread = ThreadPoolExecutor(1, thread_name_prefix="admin-stores")
            opened.callback(store_thread.shutdown, wait=True)
            sessions, throttle, pending = _session_state(settings, clock, opened)
            services = AdminServices(
                settings=settings,
                source=source,
                operators=operators,
                keys=keys,
                audit=AuditAdmin(settings),
                search=AuditSearch(settings),
                trail=trail,
                sessions=sessions,
                throttle=throttle,
                store_thread=store_thread,
                link=link or GatewayLink(),
                oidc=OidcLogin.from_settings(settings.admin.oidc, clock, pending),
                verifications=VerificationJobs(clock),
            )
            yield {"services": services}
            await services.verifications.wait()

    document = admin_openapi()

    async def openapi(request: Request) -> Response:
        return json_response(document, 200, request.headers.get("x-request-id") or "-")

    return Starlette(
        routes=[
            Route("/admin/api/openapi.json", openapi, methods=["GET"]),
            *AdminRoutes(OPERATIONS).routes(),
            *console_routes(),
            *audit_console_routes(),
            *page_routes(),
        ],
        lifespan=lifespan,
        exception_handlers={HTTPException: http_exception},
    )


def _session_state(
    settings: Settings, clock: Clock, opened: ExitStack
) -> tuple[
    SessionStore | PostgresSessionStore,
    LoginThrottle | PostgresLoginThrottle,
    PendingLogins | None,
]:
    """Sessions, failed logins and OIDC logins under way: in PostgreSQL with
    ``database_url`` (shared by every replica), else in this process."""
    ttl, failures, window = (
        settings.admin.session_ttl_s,
        settings.admin.login_max_failures,
        settings.admin.login_window_s,
    )
    if settings.database_url is None:
        return SessionStore(ttl, clock), LoginThrottle(failures, window, clock), None
    try:
        db = StateConnection(settings.database_url)
        opened.callback(db.close)
        logins = StateConnection(settings.database_url)  # used from worker threads
        opened.callback(logins.close)
    except StateDatabaseUnavailable as exc:
        raise ServiceUnavailable(str(exc)) from exc
    return (
        PostgresSessionStore(db, ttl, clock),
        PostgresLoginThrottle(db, failures, window, clock),
        PostgresPendingLogins(logins),
    )
