"""Hot reload: read the configuration again, validate it as ``localgate check`` does, and
swap the policy snapshot atomically.

A rejected file changes nothing: the gateway keeps its last good configuration, logs
every problem with its field path, and says so in ``/readyz`` and the metrics. A reload
applies what can change while running (redaction policy and rules, tenants, cache and
retrieval policy, local embeddings); settings that need a restart (listen address,
storage paths, upstream, audit store, embedder, ...) are named in the log and keep
their running values until then.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localgate.config import Settings, load_settings
from localgate.errors import ConfigError
from localgate.observability import GatewayMetrics
from localgate.policy.snapshot import PolicySnapshot

__all__ = ["RESTART_ONLY", "ConfigReloader", "ReloadResult", "restart_needed_for"]

logger = logging.getLogger("localgate.config")

# Settings read once at start: a reload names their changes and keeps the running values.
RESTART_ONLY: tuple[str, ...] = (
    "data_dir",
    "database_url",
    "server",
    "upstream",
    # Named upstreams (their sessions and key pools) are built at start; routes, aliases
    # and tenants' residency lists reload.
    "upstreams",
    "retries",
    "circuit_breaker",
    "logging",
    "telemetry",
    "audit",
    "embeddings",
    "proxy.enable_audit",
    "proxy.signature_key_file",
    "cache.vector_store",
    "cache.persist_path",
    "cache.chroma_url",
    "cache.timeout_s",
    "cache.semantic.max_index_entries",
    "limits.backend",
    "limits.redis_url",
    "limits.on_backend_error",
    "limits.lease_s",
    "limits.max_queue",
    # The drift windows are built at start; confidence thresholds and retry models reload.
    "quality.drift",
)

# Checks of a new configuration against what is running, beyond the settings above:
# each returns the restart notes for what it cannot apply.
RestartCheck = Callable[[Settings], list[str]]
# Work to do with a new snapshot before it is swapped in (building detectors for new
# rules, so the first request under them does not pay); raising rejects the reload.
Preparation = Callable[[PolicySnapshot], None]


@dataclass(frozen=True, slots=True)
class ReloadResult:
    """What one reload did."""

    applied: bool
    version: int  # the version running after it
    hash: str
    at: float  # wall clock
    problems: tuple[str, ...] = ()  # why it was rejected: "field.path: reason" lines
    restart_needed: tuple[str, ...] = ()  # changes that wait for a restart

    def as_dict(self) -> dict[str, Any]:
        """For ``/readyz`` and ``localgate reload``."""
        return {
            "applied": self.applied,
            "at": round(self.at, 3),
            "problems": list(self.problems),
            "restart_needed": list(self.restart_needed),
        }


class ConfigReloader:
    """Holds the current policy snapshot and replaces it when the configuration is reloaded."""

    def __init__(
        self,
        snapshot: PolicySnapshot,
        path: Path | None,
        metrics: GatewayMetrics,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.current = snapshot
        # Restart-only changes are named against what the process started with, on every
        # reload until the restart.
        self._started = snapshot.settings
        self.last: ReloadResult | None = None
        self.attempts = 0
        self._path = path
        self._environ = environ
        self._clock = clock
        self._metrics = metrics
        self._checks: list[RestartCheck] = []
        self._preparations: list[Preparation] = []
        self._lock = asyncio.Lock()
        metrics.config_info.labels(snapshot.hash, str(snapshot.version)).set(1)

    def check_before_applying(self, check: RestartCheck) -> None:
        """Add a check naming what a new configuration changes that needs a restart."""
        self._checks.append(check)

    def prepare_with(self, preparation: Preparation) -> None:
        """Run ``preparation`` on each new snapshot before it is swapped in."""
        self._preparations.append(preparation)
        preparation(self.current)

    async def reload(self) -> ReloadResult:
        """Reload now (one at a time); the work runs off the event loop."""
        async with self._lock:
            result, snapshot = await asyncio.to_thread(self._reload)
            # Swapped on the event loop's thread: a request reads the old or the new
            # snapshot, whole, when its identity is established, and keeps it.
            if snapshot is not None:
                self.current = snapshot
            self._record(result)
            return result

    def _reload(self) -> tuple[ReloadResult, PolicySnapshot | None]:
        running = self.current
        at = self._clock()
        environ = os.environ if self._environ is None else self._environ
        try:
            settings, _ = load_settings(self._path, environ)
        except ConfigError as exc:
            return self._rejected(at, exc.problems), None
        snapshot = PolicySnapshot.build(
            settings,
            version=running.version + 1,
            source=str(self._path) if self._path else None,
            loaded_at=at,
        )
        try:
            for preparation in self._preparations:
                preparation(snapshot)
        except (ConfigError, ValueError) as exc:
            problems = exc.problems if isinstance(exc, ConfigError) else [str(exc)]
            return self._rejected(at, problems), None
        notes = restart_needed_for(self._started, settings)
        for check in self._checks:
            notes.extend(check(settings))
        applied = ReloadResult(
            applied=True,
            version=snapshot.version,
            hash=snapshot.hash,
            at=at,
            restart_needed=tuple(notes),
        )
        return applied, snapshot

    def _rejected(self, at: float, problems: list[str]) -> ReloadResult:
        running = self.current
        return ReloadResult(
            applied=False,
            version=running.version,
            hash=running.hash,
            at=at,
            problems=tuple(problems),
        )

    def _record(self, result: ReloadResult) -> None:
        self.attempts += 1
        self.last = result
        metrics = self._metrics
        source = self._path or "<defaults>"
        if not result.applied:
            metrics.config_reloads.labels("rejected").inc()
            metrics.config_last_reload_successful.set(0)
            logger.error(
                "configuration reload rejected (%s); still running version %d (%s):",
                source,
                result.version,
                result.hash,
            )
            for problem in result.problems:
                logger.error("  %s", problem)
            return
        metrics.config_reloads.labels("applied").inc()
        metrics.config_last_reload_successful.set(1)
        metrics.config_info.clear()
        metrics.config_info.labels(result.hash, str(result.version)).set(1)
        logger.info(
            "configuration reloaded from %s: version %d (%s)", source, result.version, result.hash
        )
        for note in result.restart_needed:
            logger.warning("  %s", note)


def restart_needed_for(running: Settings, new: Settings) -> list[str]:
    """The restart-only settings ``new`` changes, each as a note for the log."""
    before, after = _flat(running), _flat(new)
    changed = sorted(
        name
        for name in set(before) | set(after)
        if before.get(name) != after.get(name)
        and any(name == prefix or name.startswith(f"{prefix}.") for prefix in RESTART_ONLY)
    )
    notes = [f"{name}: changed; takes effect after a restart" for name in changed]
    if running.upstream_api_key != new.upstream_api_key:
        notes.append("the upstream API key: changed; takes effect after a restart")
    if running.upstream_keys != new.upstream_keys:
        notes.append("the named upstreams' API keys: changed; take effect after a restart")
    if running.chroma_token != new.chroma_token:
        notes.append("LOCALGATE_CHROMA_TOKEN: changed; takes effect after a restart")
    return notes


def _flat(settings: Settings) -> dict[str, Any]:
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and prefix != "tenants":
            for name, inner in value.items():
                walk(f"{prefix}.{name}" if prefix else str(name), inner)
        else:
            flat[prefix] = value

    walk("", settings.model_dump(mode="json"))
    return flat
