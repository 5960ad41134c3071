"""How the gateway reaches an upstream: the CAs it trusts, its client certificate, its proxy.

Corporate networks let traffic out only through a proxy (``CONNECT``), often one that
inspects TLS with a CA of its own; private upstreams have private CAs and may want to see
a client certificate. Each upstream's ``Egress`` is resolved once at start from its
settings and the environment, the way curl and requests read it: ``upstream.proxy_url``
wins; else ``https_proxy``/``HTTPS_PROXY`` (``http_proxy`` for an http:// upstream, then
``all_proxy``), unless ``no_proxy``/``NO_PROXY`` names the upstream's host (a name, a
``.domain`` suffix, an address or a network, ``*`` for all).

The network library is not imported here: ``upstream/gemini.py`` hands the result to
aiohttp.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from localgate.config import EgressSettings, Settings

__all__ = ["Egress", "EgressError", "egress_for", "egress_problems", "proxy_for"]

# The first cipher suites a TLS 1.2 connection offers; TLS 1.3 has only good ones.
_TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!MD5:!DSS"


class EgressError(Exception):
    """An upstream's CA file or client certificate cannot be used; the message says which."""


@dataclass(frozen=True, slots=True)
class Egress:
    """One upstream's way out: its TLS context (None for http://) and proxy (None: direct)."""

    ssl: ssl.SSLContext | None
    proxy: str | None
    # Where the trusted CAs came from, for messages: a file, or the system's store.
    trust: str

    def describe(self) -> str:
        """For the start-up log: the proxy (without credentials) and the trust anchors."""
        route = f"via proxy {_without_credentials(self.proxy)}" if self.proxy else "direct"
        return f"{route}, trusting {self.trust}"


def egress_for(
    url: str,
    own: EgressSettings,
    inherited: EgressSettings | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    where: str = "upstream",
) -> Egress:
    """The egress of the upstream at ``url``: its own settings, ``ca_file`` and
    ``proxy_url`` falling back to ``inherited`` (the ``upstream:`` section), the proxy to
    the environment. Raises ``EgressError`` naming the setting whose file is unusable."""
    ca_file = own.ca_file or (inherited.ca_file if inherited else None)
    proxy_setting = own.proxy_url or (inherited.proxy_url if inherited else None)
    context = None
    if urlsplit(url).scheme == "https":
        context = _client_context(own, ca_file, where)
    return Egress(
        ssl=context,
        proxy=proxy_for(url, proxy_setting, environ or {}),
        trust=str(ca_file) if ca_file else "the system's CAs",
    )


def egress_problems(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """One line per upstream whose CA file or client certificate cannot be used."""
    problems = []
    upstreams: list[tuple[str, str, EgressSettings, EgressSettings | None]] = [
        ("upstream", settings.upstream.base_url, settings.upstream, None)
    ]
    upstreams += [
        (f"upstreams.{name}", named.url, named, settings.upstream)
        for name, named in settings.upstreams.items()
    ]
    for where, url, own, inherited in upstreams:
        try:
            egress_for(url, own, inherited, environ, where=where)
        except EgressError as exc:
            problems.append(str(exc))
    return problems


def proxy_for(url: str, setting: str | None, environ: Mapping[str, str]) -> str | None:
    """The proxy for ``url``: ``setting`` ("direct": none), else the environment's."""
    if setting == "direct":
        return None
    if setting:
        return setting
    parts = urlsplit(url)
    scheme = parts.scheme or "https"
    proxy = _env(environ, f"{scheme}_proxy") or _env(environ, "all_proxy")
    if not proxy:
        return None
    if _bypassed(parts.hostname or "", parts.port, _env(environ, "no_proxy")):
        return None
    if "://" not in proxy:
        proxy = f"http://{proxy}"  # as curl reads HTTPS_PROXY=proxy.corp:3128
    return proxy


def _client_context(own: EgressSettings, ca_file: Path | None, where: str) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    except (OSError, ssl.SSLError) as exc:
        source = f"{where}.ca_file" if own.ca_file else "upstream.ca_file"
        raise EgressError(
            f"{source}: {ca_file} cannot be read as PEM certificates ({_reason(exc)})"
        ) from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(_TLS12_CIPHERS)
    if own.client_cert_file is not None:
        key_file = own.client_key_file
        try:
            context.load_cert_chain(str(own.client_cert_file), str(key_file) if key_file else None)
        except (OSError, ssl.SSLError) as exc:
            raise EgressError(
                f"{where}.client_cert_file: {own.client_cert_file} "
                f"{'with ' + str(key_file) + ' ' if key_file else ''}is not a usable "
                f"certificate and key ({_reason(exc)}); the key must match the certificate"
            ) from exc
    return context


def _env(environ: Mapping[str, str], name: str) -> str:
    # The lower-case name first, as curl does (only it is read for http_proxy there).
    return (environ.get(name) or environ.get(name.upper()) or "").strip()


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``no_proxy`` names ``host``: an entry equal to it, a domain it is in (with
    or without a leading dot), an address or network holding it, or ``*``."""
    if not no_proxy or not host:
        return False
    host = host.lower().strip("[]")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        name, _, entry_port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
        if entry_port and port is not None and entry_port != str(port):
            continue
        name = name.strip("[]")
        if address is not None:
            try:
                if address in ipaddress.ip_network(name, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name = name.lstrip(".")
        if host == name or host.endswith("." + name):
            return True
    return False


def _has_port(entry: str) -> bool:
    # "host:443" or "[::1]:443"; a bare IPv6 address has colons but no port.
    if entry.startswith("["):
        return "]:" in entry
    return entry.count(":") == 1


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{':' + str(parts.port) if parts.port else ''}"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).lower().replace("_", " ")
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return type(exc).__name__
