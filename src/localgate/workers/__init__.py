"""Several processes on one port: ``localgate serve --workers N`` (docs/workers.md).

``supervisor.py`` is the parent (binds, starts, restarts, drains, passes SIGHUP on),
``worker.py`` the worker's side, ``store.py`` the one vector store process the workers
share; ``observability/host.py`` makes ``/metrics`` report the whole host.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from localgate.config import ENV_CHROMA_URL, ENV_SIGNATURE_KEY, Settings, load_settings
from localgate.errors import ConfigError
from localgate.workers.supervisor import Supervisor, bind
from localgate.workers.worker import Worker, worker_from_environment

__all__ = ["Worker", "serve_workers", "shared_state_problems", "worker_from_environment"]

logger = logging.getLogger("localgate.workers")

# The four counted limits; the other fields only shape how they are applied.
_COUNTED = ("requests_per_minute", "tokens_per_minute", "tokens_per_day", "concurrent_requests")


def shared_state_problems(settings: Settings, workers: int) -> list[str]:
    """What cannot be shared by ``workers`` processes, one line each (empty: all can)."""
    if workers > 1 and settings.limits.backend == "memory" and _limits_configured(settings):
        return [
            f"limits.backend: memory counts in each process, so {workers} workers would "
            "each allow the whole limit; use limits.backend: redis (with limits.redis_url) "
            "or --workers 1"
        ]
    return []


def serve_workers(
    settings: Settings,
    source: Path | None,
    host: str,
    port: int,
    count: int,
    pid_file: Path,
) -> int:
    """Run the gateway as ``count`` workers on ``host:port``, configured from ``source``
    (None: the defaults); the exit code."""
    # Files every worker would otherwise race to create on a first start.
    _prepare_shared_files(settings)
    try:
        listener = bind(host, port)
    except OSError as exc:
        print(f"localgate: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        return 3
    environment = dict(os.environ)
    store = None
    metrics_dir = Path(tempfile.mkdtemp(prefix="localgate-workers-"))  # owner-only
    try:
        if _needs_store_process(settings):
            from localgate.workers.store import StoreProcess, StoreProcessError

            try:
                store = StoreProcess.start(
                    settings.vector_store_path, settings.data_dir / "chroma-server.log"
                )
            except StoreProcessError as exc:
                print(f"localgate: cannot start: {exc}", file=sys.stderr)
                return 3
            environment[ENV_CHROMA_URL] = store.url
        supervisor = Supervisor(
            # This same command again, as a worker (WORKER_ENV tells it).
            command=[sys.executable, "-m", "localgate", *sys.argv[1:]],
            environment=environment,
            listener=listener,
            count=count,
            metrics_dir=metrics_dir,
            drain_delay_s=settings.server.drain_delay_s,
            drain_timeout_s=settings.server.drain_timeout_s,
            config_problem=lambda: _config_problem(source),
        )
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{os.getpid()}\n", encoding="ascii")
        logger.info("%d workers on %s:%d; supervisor pid %d", count, host, port, os.getpid())
        try:
            return supervisor.run()
        finally:
            with contextlib.suppress(OSError):
                if pid_file.read_text(encoding="ascii").strip() == str(os.getpid()):
                    pid_file.unlink()
    finally:
        listener.close()
        if store is not None:
            store.stop()
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _config_problem(source: Path | None) -> str | None:
    """The first problem of the configuration file as it is now (None: valid)."""
    try:
        load_settings(source)
    except ConfigError as exc:
        return exc.problems[0] if exc.problems else "invalid"
    return None


def _limits_configured(settings: Settings) -> bool:
    own = [settings.limits.default, *(tenant.limits for tenant in settings.tenants.values())]
    keys = [key for tenant in settings.tenants.values() for key in tenant.limits.keys.values()]
    return any(getattr(limits, name) is not None for limits in own + keys for name in _COUNTED)


def _needs_store_process(settings: Settings) -> bool:
    if settings.cache.chroma_url is not None:
        return False
    from localgate.app.vector import needs_vector_layer

    return needs_vector_layer(settings)


def _prepare_shared_files(settings: Settings) -> None:
    from localgate.identity import open_key_store
    from localgate.secret import load_or_create_key

    # With database_url, key files are never created (docs/shared-state.md): the start-up
    # checks have refused a missing one already.
    if not os.environ.get(ENV_SIGNATURE_KEY) and settings.database_url is None:
        load_or_create_key(None, settings.signature_key_path)
    open_key_store(settings, serving=False).close()
    if settings.proxy.enable_audit:
        # Opened once here, so the store's first-use rows are written by one process:
        # workers opening a new store at once collide on them (tests/workers, xfail).
        from localgate.audit.crypto import CipherSuite
        from localgate.audit.store import AuditStore
        from localgate.audit.trail import creates_keys, database, master_key

        AuditStore(
            database(settings),
            master_key(settings, create=creates_keys(settings)),
            CipherSuite(settings.audit.suite),
            key_period=settings.audit.key_period,
            synchronous=settings.audit.synchronous.upper(),
        ).close()
