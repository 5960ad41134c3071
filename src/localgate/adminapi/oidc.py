"""Login with the company's identity provider: OpenID Connect, authorization code flow
with PKCE (RFC 7636, S256), the role taken from a claim of the ID token.

``begin`` makes the authorization URL with a fresh state, nonce and code verifier, kept
10 minutes and used once (in memory, or with ``database_url`` in PostgreSQL, so that the
provider's redirect may reach any replica: ``sessions_postgres.py``); ``finish`` takes the
code and state the browser brings back, exchanges the code with the verifier at the token
endpoint, and verifies the ID token: signature against the provider's published keys
(PyJWT), issuer, audience, expiry and our nonce. The provider's HTTP calls are made with
the standard library in a worker thread. The identity provider must be reached over HTTPS
(plain HTTP only on loopback, for tests and local development).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import jwt

from localgate.admin.operators import Operator, Role
from localgate.config import OidcSettings
from localgate.errors import (
    FailedPrecondition,
    PermissionDenied,
    ServiceUnavailable,
    Unauthenticated,
)
from localgate.identity.keys import TENANT_FORMAT

__all__ = ["MemoryPendingLogins", "OidcLogin", "PendingLogin", "PendingLogins"]

_PENDING_S = 600.0
MAX_PENDING = 10_000
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]


@dataclass(frozen=True, slots=True)
class PendingLogin:
    """A login sent to the identity provider, waiting for the browser to come back."""

    verifier: str
    nonce: str
    expires_at: float


class PendingLogins(Protocol):
    """Where logins under way wait for the browser to come back (thread-safe)."""

    def add(self, state: str, pending: PendingLogin, now: float) -> bool:
        """Keep ``pending`` under ``state``, forgetting expired ones; False if too many."""
        ...

    def take(self, state: str) -> PendingLogin | None:
        """The login under ``state``, removed (each is used once); None if unknown."""
        ...


class MemoryPendingLogins:
    """Logins under way in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, PendingLogin] = {}

    def add(self, state: str, pending: PendingLogin, now: float) -> bool:
        """See ``PendingLogins.add``."""
        with self._lock:
            for old in [s for s, p in self._pending.items() if p.expires_at <= now]:
                del self._pending[old]
            if len(self._pending) >= MAX_PENDING:
                return False
            self._pending[state] = pending
            return True

    def take(self, state: str) -> PendingLogin | None:
        """See ``PendingLogins.take``."""
        with self._lock:
            return self._pending.pop(state, None)


@dataclass(frozen=True, slots=True)
class _Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str


class OidcLogin:
    """The OpenID Connect login of the admin API."""

    def __init__(
        self,
        settings: OidcSettings,
        clock: Callable[[], float],
        client_secret: str | None = None,
        pending: PendingLogins | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._client_secret = client_secret
        self._pending: PendingLogins = pending or MemoryPendingLogins()
        self._provider: _Provider | None = None
        self._keys: jwt.PyJWKClient | None = None

    @classmethod
    def from_settings(
        cls,
        settings: OidcSettings,
        clock: Callable[[], float],
        pending: PendingLogins | None = None,
    ) -> OidcLogin | None:
        """The login ``settings`` describe (its logins under way in ``pending``, by default
        in memory); None when OIDC is off."""
        if not settings.enabled:
            return None
        secret = None
        if settings.client_secret_file is not None:
            try:
                secret = settings.client_secret_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise FailedPrecondition(
                    f"admin.oidc.client_secret_file: cannot read {settings.client_secret_file}"
                ) from exc
        return cls(settings, clock, secret, pending)

    # -- the two steps (run in a worker thread: they may call the provider) ---------------

    def begin(self) -> tuple[str, str]:
        """The authorization URL to send the browser to, and its state."""
        provider = self._discover()
        state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        verifier = secrets.token_urlsafe(48)
        challenge = _b64url(hashlib.sha256(verifier.encode()).digest())
        now = self._clock()
        if not self._pending.add(state, PendingLogin(verifier, nonce, now + _PENDING_S), now):
            raise ServiceUnavailable("Too many logins in progress; try again in a few minutes.")
        query = urllib.parse.urlencode(
            {
                "response_type": "code",
                "client_id": self._settings.client_id,
                "redirect_uri": self._settings.redirect_uri,
                "scope": " ".join(self._settings.scopes),
                "state": state,
                "nonce": nonce,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
        )
        separator = "&" if "?" in provider.authorization_endpoint else "?"
        return f"{provider.authorization_endpoint}{separator}{query}", state

    def finish(self, code: str, state: str) -> Operator:
        """The operator the provider vouches for; ``Unauthenticated`` for an unknown, used
        or expired state, a refused code or an ID token that does not verify;
        ``PermissionDenied`` when its claims map to no role (or to several)."""
        pending = self._pending.take(state)
        if pending is None or pending.expires_at <= self._clock():
            raise Unauthenticated("This login is unknown or has expired; start it again.")
        provider = self._discover()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self._settings.redirect_uri or "",
            "client_id": self._settings.client_id,
            "code_verifier": pending.verifier,
        }
        if self._client_secret is not None:
            form["client_secret"] = self._client_secret
        answer = self._call(provider.token_endpoint, urllib.parse.urlencode(form).encode())
        id_token = answer.get("id_token")
        if not isinstance(id_token, str):
            raise Unauthenticated("The identity provider sent no ID token.")
        claims = self._verify(provider, id_token)
        if not hmac_equal(str(claims.get("nonce", "")), pending.nonce):
            raise Unauthenticated("The ID token was not issued for this login.")
        return self._operator(claims)

    # -- the provider -------------------------------------------------------------------

    def _discover(self) -> _Provider:
        if self._provider is None:
            issuer = (self._settings.issuer or "").rstrip("/")
            found = self._call(f"{issuer}/.well-known/openid-configuration")
            try:
                provider = _Provider(
                    issuer=str(found["issuer"]),
                    authorization_endpoint=str(found["authorization_endpoint"]),
                    token_endpoint=str(found["token_endpoint"]),
                    jwks_uri=str(found["jwks_uri"]),
                )
            except KeyError as exc:
                raise ServiceUnavailable(
                    f"The identity provider's discovery document lacks {exc.args[0]}."
                ) from exc
            if provider.issuer.rstrip("/") != issuer:
                raise ServiceUnavailable(
                    "The identity provider names another issuer than admin.oidc.issuer."
                )
            for url in (
                provider.authorization_endpoint,
                provider.token_endpoint,
                provider.jwks_uri,
            ):
                _check_url(url)
            self._keys = jwt.PyJWKClient(provider.jwks_uri, timeout=int(self._settings.timeout_s))
            self._provider = provider
        return self._provider

    def _call(self, url: str, form: bytes | None = None) -> dict[str, Any]:
        _check_url(url)
        request = urllib.request.Request(url, data=form, method="POST" if form else "GET")  # noqa: S310 - scheme checked
        request.add_header("accept", "application/json")
        if form is not None:
            request.add_header("content-type", "application/x-www-form-urlencoded")
        try:
            with urllib.request.urlopen(  # noqa: S310 - scheme checked above
                request, timeout=self._settings.timeout_s, context=ssl.create_default_context()
            ) as response:
                data = json.loads(response.read(1024 * 1024))
        except urllib.error.HTTPError as exc:
            if form is not None and 400 <= exc.code < 500:
                raise Unauthenticated("The identity provider refused the login code.") from exc
            raise ServiceUnavailable(f"The identity provider answered {exc.code}.") from exc
        except (OSError, ValueError) as exc:
            raise ServiceUnavailable("The identity provider cannot be reached.") from exc
        if not isinstance(data, dict):
            raise ServiceUnavailable("The identity provider's answer is not a JSON object.")
        return data

    def _verify(self, provider: _Provider, id_token: str) -> dict[str, Any]:
        keys = self._keys
        if keys is None:  # _discover sets it; it ran first
            raise ServiceUnavailable("The identity provider's keys are not known yet.")
        try:
            key = keys.get_signing_key_from_jwt(id_token)
            claims: dict[str, Any] = jwt.decode(
                id_token,
                key.key,
                algorithms=_ALGORITHMS,
                audience=self._settings.client_id,
                issuer=provider.issuer,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.PyJWKClientConnectionError as exc:
            raise ServiceUnavailable("The identity provider's keys cannot be fetched.") from exc
        except jwt.PyJWTError as exc:
            raise Unauthenticated("The ID token does not verify.") from exc
        return claims

    def _operator(self, claims: dict[str, Any]) -> Operator:
        settings = self._settings
        values = claims.get(settings.role_claim)
        if isinstance(values, str):
            values = [values]
        if not isinstance(values, list):
            values = []
        roles = {
            settings.role_map[v] for v in values if isinstance(v, str) and v in settings.role_map
        }
        if len(roles) != 1:
            raise PermissionDenied(
                "Your identity provider account maps to "
                + ("no role here." if not roles else "several roles here; ask for one.")
            )
        role = Role(roles.pop())
        tenant = None
        if role is Role.TENANT_ADMIN:
            tenant = claims.get(settings.tenant_claim)
            if not isinstance(tenant, str) or not TENANT_FORMAT.match(tenant):
                raise PermissionDenied(
                    f"A tenant-admin needs its tenant in the {settings.tenant_claim} claim."
                )
        name = claims.get(settings.name_claim) or claims["sub"]
        return Operator(f"oidc:{name}", role, tenant)


def hmac_equal(left: str, right: str) -> bool:
    """Constant-time comparison of two strings."""
    return secrets.compare_digest(left.encode(), right.encode())


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _check_url(url: str) -> None:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "https" or (parsed.scheme == "http" and parsed.hostname in _LOOPBACK):
        return
    raise ServiceUnavailable(
        "The identity provider must be reached over HTTPS (plain HTTP only on loopback)."
    )
