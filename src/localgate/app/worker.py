"""Which worker of ``localgate serve --workers N`` this process is, for the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["WorkerSlot"]


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """Worker ``index`` (0 to ``count`` - 1; a restarted worker takes its predecessor's) of
    the supervisor ``supervisor_pid``, whose workers answer each other's questions (metrics,
    configuration) on sockets in ``metrics_dir``."""

    index: int
    metrics_dir: Path
    count: int
    supervisor_pid: int
