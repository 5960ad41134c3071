"""Which worker of ``localgate serve --workers N`` this process is, for the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["WorkerSlot"]


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """Worker ``index`` (0 to N-1; a restarted worker takes its predecessor's) of a
    supervisor whose workers hand each other their metrics in ``metrics_dir``."""

    index: int
    metrics_dir: Path
