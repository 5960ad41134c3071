"""The admin API's listener and its sessions (docs/admin-api.md)."""

from __future__ import annotations

from pydantic import Field

from localgate.config.base import Section

__all__ = ["AdminSettings"]


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
