"""Logging in and out of the admin API: who the caller is, password logins, OIDC logins,
and the session cookie they set."""

from __future__ import annotations

import functools
import hmac
import math
from datetime import UTC, datetime

from starlette.responses import RedirectResponse, Response

from localgate.admin.operators import Operator
from localgate.adminapi.handoff import CONSOLE_OIDC_COOKIE, failed_page, signed_in_page
from localgate.adminapi.models import (
    LoginResult,
    OidcCallbackParams,
    Ok,
    WhoAmI,
)
from localgate.adminapi.routing import API_PREFIX, SESSION_COOKIE, Call
from localgate.adminapi.sessions import NewSession
from localgate.errors import (
    InvalidArgument,
    LocalgateError,
    NotFound,
    ResourceExhausted,
    Unauthenticated,
)

__all__ = ["OIDC_COOKIE", "login", "logout", "oidc_callback", "oidc_login", "whoami"]

OIDC_COOKIE = "lg_admin_oidc"


async def whoami(call: Call) -> WhoAmI:
    """The caller."""
    op = call.operator
    return WhoAmI(name=op.name, role=op.role, tenant=op.tenant, via=call.via)


async def login(call: Call) -> LoginResult:
    """Check a user's password (throttled per user and address); open a session."""
    services, body = call.services, call.body
    address = call.request.client.host if call.request.client else "-"
    wait = await services.in_store_thread(services.throttle.retry_after, body.name, address)
    if wait is not None:
        raise ResourceExhausted(
            "Too many failed logins; try again later.", {"retry-after": str(math.ceil(wait))}
        )
    user = await services.in_store_thread(
        services.operators.check_password, body.name, body.password
    )
    if user is None:
        await services.in_store_thread(services.throttle.failed, body.name, address)
        raise Unauthenticated("The user name or password is not right.")
    await services.in_store_thread(services.throttle.succeeded, body.name, address)
    opened = await services.in_store_thread(services.sessions.open, user)
    return _session_opened(call, user, body.name, opened)


def _session_opened(call: Call, operator: Operator, name: str, opened: NewSession) -> LoginResult:
    secure = "; Secure" if call.request.url.scheme == "https" else ""
    call.response_headers.append(
        (
            "set-cookie",
            f"{SESSION_COOKIE}={opened.session_id}; Path=/admin/; HttpOnly; SameSite=Strict; "
            f"Max-Age={int(call.services.sessions.ttl_s)}{secure}",
        )
    )
    return LoginResult(
        name=name,
        role=operator.role,
        tenant=operator.tenant,
        csrf_token=opened.session.csrf_token,
        expires_at=datetime.fromtimestamp(opened.session.expires_at, UTC),
    )


async def oidc_login(call: Call) -> Response:
    """Send the browser to the identity provider, with the login's state in a cookie."""
    oidc = call.services.oidc
    if oidc is None:
        raise NotFound("OIDC login is not configured (admin.oidc).")
    url, state = await call.services.in_thread(oidc.begin)
    secure = "; Secure" if call.request.url.scheme == "https" else ""
    response = RedirectResponse(url, status_code=302)
    # Lax, not Strict: the browser must send it back on the provider's redirect.
    response.headers.append(
        "set-cookie",
        f"{OIDC_COOKIE}={state}; Path={API_PREFIX}/oidc/; HttpOnly; SameSite=Lax; "
        f"Max-Age=600{secure}",
    )
    return response


async def oidc_callback(call: Call) -> LoginResult | Response:
    """Finish a login at the identity provider: the code exchanged, the ID token verified,
    the role read from its claims; a session opened as for a password login. A login begun
    on the console's login page ends there, with a page instead of JSON (``handoff``)."""
    if not call.request.cookies.get(CONSOLE_OIDC_COOKIE):
        return await _oidc_finish(call)
    try:
        await _oidc_finish(call)
    except LocalgateError as exc:
        answer = failed_page(exc.message, exc.code)
    else:
        answer = signed_in_page()
    call.response_headers.append(
        ("set-cookie", f"{CONSOLE_OIDC_COOKIE}=; Path={API_PREFIX}/oidc/; HttpOnly; Max-Age=0")
    )
    return answer


async def _oidc_finish(call: Call) -> LoginResult:
    oidc = call.services.oidc
    if oidc is None:
        raise NotFound("OIDC login is not configured (admin.oidc).")
    query: OidcCallbackParams = call.query
    if query.error is not None:
        raise Unauthenticated(f"The identity provider refused the login ({query.error}).")
    if query.code is None or query.state is None:
        raise InvalidArgument("The identity provider's answer has no code or state.")
    # The state must come back to the browser that started the login (no login CSRF).
    started = call.request.cookies.get(OIDC_COOKIE, "")
    if not hmac.compare_digest(started.encode(), query.state.encode()):
        raise Unauthenticated("This login was not started in this browser; start it again.")
    operator = await call.services.in_thread(oidc.finish, query.code, query.state)
    opened = await call.services.in_store_thread(
        functools.partial(call.services.sessions.open, operator, local=False)
    )
    call.response_headers.append(
        ("set-cookie", f"{OIDC_COOKIE}=; Path={API_PREFIX}/oidc/; HttpOnly; Max-Age=0")
    )
    return _session_opened(call, operator, operator.name, opened)


async def logout(call: Call) -> Ok:
    """End the caller's session (a token has none: nothing to do)."""
    session_id = call.request.cookies.get(SESSION_COOKIE)
    if session_id:
        await call.services.in_store_thread(call.services.sessions.close, session_id)
    call.response_headers.append(
        ("set-cookie", f"{SESSION_COOKIE}=; Path=/admin/; HttpOnly; SameSite=Strict; Max-Age=0")
    )
    return Ok()
