"""The admin API's listener and its sessions (docs/admin-api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from localgate.config.base import Section

__all__ = ["AdminSettings", "OidcSettings"]

AdminRole = Literal["admin", "security", "auditor", "tenant-admin", "viewer"]


class OidcSettings(Section):
    """Login with the company's identity provider: OpenID Connect, authorization code with
    PKCE; the role comes from a claim of the ID token."""

    enabled: bool = False
    # Discovery at <issuer>/.well-known/openid-configuration; the ID token's iss must match.
    issuer: str | None = None
    client_id: str = ""
    # A confidential client's secret, in a file of its own (None: a public client, PKCE only).
    client_secret_file: Path | None = None
    # Where the identity provider sends the browser back: <admin URL>/admin/api/v1/oidc/callback
    redirect_uri: str | None = None
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    # The claim listing the user's groups or roles, and which of its values means which role
    # here; a user whose values map to no role, or to more than one, is refused.
    role_claim: str = "roles"
    role_map: dict[str, AdminRole] = Field(default_factory=dict)
    # A tenant-admin's tenant, from this claim.
    tenant_claim: str = "lg_tenant"
    # How the user is named in sessions and the admin-action trail (else the subject).
    name_claim: str = "email"
    timeout_s: float = Field(10.0, gt=0)

    @model_validator(mode="after")
    def _complete_when_enabled(self) -> OidcSettings:
        if self.enabled and not (self.issuer and self.client_id and self.redirect_uri):
            raise ValueError("needs issuer, client_id and redirect_uri when enabled")
        return self


class AdminSettings(Section):
    """Where the admin API listens, and how its logins and sessions behave."""

    # A listener of its own, never the data plane's port. port 0 (or enabled: false) turns
    # it off; `localgate serve --admin-port` overrides the port.
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(8081, ge=0, le=65535)
    # A console login lasts this long (the cookie's Max-Age and the server's own expiry).
    session_ttl_s: float = Field(8 * 3600, gt=0)
    # Failed logins for one user from one address before further attempts are refused
    # (429) until the window has passed since the first of them.
    login_max_failures: int = Field(5, ge=1)
    login_window_s: float = Field(900.0, gt=0)
    oidc: OidcSettings = OidcSettings()
