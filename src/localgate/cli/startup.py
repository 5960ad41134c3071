"""What keeps ``localgate serve`` from starting, found before the server starts: one line
each, naming the setting to fix, instead of a traceback from deep in the start-up."""

from __future__ import annotations

import socket
import traceback

from localgate.config import Settings

__all__ = ["startup_problems"]


def startup_problems(settings: Settings, host: str, port: int, *, debug: bool) -> list[str]:
    """Every problem found (empty: it can start). With ``debug`` an unexpected error's
    traceback is kept; otherwise it is one line too."""
    checks = [_port, _shared_state]
    if settings.proxy.enable_audit:
        checks.append(_audit)
    problems: list[str] = []
    for check in checks:
        if check is _audit and any(line.startswith("database_url:") for line in problems):
            break  # the same database: once is enough
        try:
            problems += check(settings, host, port)
        except Exception as exc:  # noqa: BLE001 - one line, unless --debug asks for more
            if debug:
                problems.append(traceback.format_exc())
            else:
                first = str(exc).strip().splitlines()
                reason = f"{type(exc).__name__}: {first[0]}" if first else type(exc).__name__
                problems.append(f"{reason} (run with --debug for the traceback)")
    return problems


def _port(settings: Settings, host: str, port: int) -> list[str]:
    """The address is free (as uvicorn binds it: SO_REUSEADDR, so TIME_WAIT is no problem)."""
    if port == 0:
        return []
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return [f"server.host: cannot resolve {host!r}: {exc.strerror}"]
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return [f"server.port: cannot listen on {host}:{port}: {exc.strerror}"]
    return []


def _shared_state(settings: Settings, host: str, port: int) -> list[str]:
    from localgate.state.startup import startup_problems as state_problems

    return state_problems(settings)


def _audit(settings: Settings, host: str, port: int) -> list[str]:
    # Imported only when the trail is on: the audit store takes a while to import.
    from localgate.audit.trail import startup_problems as audit_problems

    # A replica given the wrong key (or none) must not come up and then refuse every request.
    return audit_problems(settings)
