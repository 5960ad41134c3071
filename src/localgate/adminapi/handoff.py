"""How an OIDC login begun in the console ends there: the identity provider sends the
browser back to the API's callback (the one redirect URI registered with it); when the
login began on the console's login page (a cookie says so), the callback answers with a
small page that moves the browser on to ``/admin/`` instead of JSON.

A page, not a redirect: the session cookie is ``SameSite=Strict``, and browsers do not
send such a cookie on a redirect chain that began at another site (the provider's). A
``<meta http-equiv="refresh">`` starts a new navigation from this site, which does. No
script: the API's answers have a CSP that allows none.
"""

from __future__ import annotations

import html
from urllib.parse import urlsplit

from starlette.responses import Response

from localgate.adminapi.services import AdminServices

__all__ = ["CONSOLE_OIDC_COOKIE", "failed_page", "provider_name", "signed_in_page"]

CONSOLE_OIDC_COOKIE = "lg_console_oidc"
_CONSOLE = "/admin/"


def provider_name(services: AdminServices) -> str | None:
    """How the login page names the identity provider (its host); None without OIDC."""
    issuer = services.settings.admin.oidc.issuer
    if services.oidc is None or not issuer:
        return None
    return urlsplit(issuer).hostname or issuer


def _page(title: str, body: str, refresh: bool) -> str:
    meta = f'<meta http-equiv="refresh" content="0; url={_CONSOLE}">' if refresh else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}'
        f"<title>{html.escape(title)}</title></head><body>{body}</body></html>"
    )


def signed_in_page() -> Response:
    """Signed in: on to the console (a link, should the browser not refresh)."""
    body = f'<p>Signed in. 已登录。 <a id="continue" href="{_CONSOLE}">Continue · 继续</a></p>'
    return Response(_page("localgate console", body, True), 200, media_type="text/html")


def failed_page(message: str, status: int) -> Response:
    """The login failed: why, and the way back to the login page."""
    body = (
        f'<p id="error">{html.escape(message)}</p>'
        f'<p><a href="{_CONSOLE}login">Log in again · 重新登录</a></p>'
    )
    return Response(_page("localgate console", body, False), status, media_type="text/html")
