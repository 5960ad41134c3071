"""A reload of every worker of ``localgate serve --workers N``, and each one's outcome.

Each worker reloads its own configuration when its supervisor passes it a SIGHUP; nothing
tells the one asking (``localgate reload``, the admin API) what the others did. So the asker
takes every worker's configuration before the signal (``WorkerConfig``: its pid and how many
reloads it has done, asked of its siblings, ``observability/siblings.py``), sends the signal,
and asks again until each worker that answered before has a newer reload to show, or has been
started again since (a new process reads the file as it starts). ``reload_outcomes`` compares
the two; ``HostReload`` does the whole round inside a worker, for the admin API.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from localgate.errors import FailedPrecondition
from localgate.observability.siblings import Siblings
from localgate.policy.reload import ConfigReloader

__all__ = [
    "APPLIED",
    "NO_ANSWER",
    "REJECTED",
    "RESTARTED",
    "STARTING",
    "HostReload",
    "WorkerConfig",
    "WorkerOutcome",
    "reload_outcomes",
]

# What a reload did in one worker.
APPLIED: Final = "applied"
REJECTED: Final = "rejected"
RESTARTED: Final = "restarted"  # a new process since the signal: it read the file as it started
STARTING: Final = "starting"  # answered neither before nor after: it reads the file as it starts
NO_ANSWER: Final = "no answer"  # answered before, did not report a reload in time

# The question a worker asks its siblings.
CONFIG = "config"
_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """What one worker runs, as it says: the configuration's version and hash, how many
    reloads it has done, and the last one's result (``ReloadResult.as_dict``)."""

    worker: int
    pid: int
    version: int
    hash: str
    reloads: int
    last_reload: Mapping[str, Any] | None

    @classmethod
    def of(cls, reloader: ConfigReloader, worker: int, pid: int) -> WorkerConfig:
        """This worker's, from its reloader."""
        return cls(
            worker=worker,
            pid=pid,
            version=reloader.current.version,
            hash=reloader.current.hash,
            reloads=reloader.attempts,
            last_reload=reloader.last.as_dict() if reloader.last is not None else None,
        )

    def as_dict(self) -> dict[str, Any]:
        """As ``/readyz?workers=all`` lists it and siblings hand it over."""
        return {
            "worker": self.worker,
            "pid": self.pid,
            "version": self.version,
            "hash": self.hash,
            "reloads": self.reloads,
            "last_reload": dict(self.last_reload) if self.last_reload is not None else None,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> WorkerConfig:
        """The one ``as_dict`` wrote (raises KeyError, TypeError, ValueError otherwise)."""
        last = raw["last_reload"]
        return cls(
            worker=int(raw["worker"]),
            pid=int(raw["pid"]),
            version=int(raw["version"]),
            hash=str(raw["hash"]),
            reloads=int(raw["reloads"]),
            last_reload=dict(last) if last is not None else None,
        )


@dataclass(frozen=True, slots=True)
class WorkerOutcome:
    """What a reload did in one worker: ``outcome`` is one of ``APPLIED``, ``REJECTED``
    (with ``problems``), ``RESTARTED``, ``STARTING``, ``NO_ANSWER``; the version and hash
    are what it runs after it (None: unknown)."""

    worker: int
    pid: int | None
    outcome: str
    version: int | None
    hash: str | None
    problems: tuple[str, ...] = ()
    restart_needed: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """Rejected, or no answer: this worker may not run the new file."""
        return self.outcome in (REJECTED, NO_ANSWER)


def reload_outcomes(
    before: Mapping[int, WorkerConfig],
    after: Mapping[int, WorkerConfig],
    count: int,
    *,
    final: bool,
) -> list[WorkerOutcome] | None:
    """Each of ``count`` workers' outcome, from their configurations before the signal and
    now; None while a worker that answered before has not reported yet (unless ``final``:
    then it is ``NO_ANSWER``)."""
    outcomes = []
    for index in range(count):
        old, new = before.get(index), after.get(index)
        outcome = _outcome(index, old, new)
        if outcome is None:
            if not final:
                return None
            outcome = WorkerOutcome(
                index,
                old.pid if old is not None else None,
                NO_ANSWER,
                old.version if old is not None else None,
                old.hash if old is not None else None,
            )
        outcomes.append(outcome)
    return outcomes


def _outcome(
    index: int, old: WorkerConfig | None, new: WorkerConfig | None
) -> WorkerOutcome | None:
    if new is None:
        # Not answering now: if it did before, it may still report (or is restarting).
        return None if old is not None else WorkerOutcome(index, None, STARTING, None, None)
    if old is None or new.pid != old.pid:
        return WorkerOutcome(index, new.pid, RESTARTED, new.version, new.hash)
    if new.reloads <= old.reloads or new.last_reload is None:
        return None
    last = new.last_reload
    return WorkerOutcome(
        index,
        new.pid,
        APPLIED if last.get("applied") else REJECTED,
        new.version,
        new.hash,
        problems=tuple(str(problem) for problem in last.get("problems", ())),
        restart_needed=tuple(str(note) for note in last.get("restart_needed", ())),
    )


class HostReload:
    """Inside one worker: every worker's configuration, and a reload of all of them through
    the supervisor with each one's outcome."""

    def __init__(
        self,
        own: Callable[[], WorkerConfig],
        siblings: Siblings,
        count: int,
        supervisor_pid: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.count = count
        self._own = own
        self._siblings = siblings
        self._supervisor_pid = supervisor_pid
        self._clock = clock
        siblings.answer(CONFIG, lambda: self._own().as_dict())

    async def configs(self) -> dict[int, WorkerConfig]:
        """Every reachable worker's configuration (this one's included), by index."""
        configs: dict[int, WorkerConfig] = {}
        for index, raw in (await self._siblings.ask(CONFIG)).items():
            try:
                configs[index] = WorkerConfig.from_dict(raw)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue  # not an answer this version understands: as if it did not answer
        own = self._own()
        configs[own.worker] = own
        return configs

    async def reload(self, timeout_s: float) -> list[WorkerOutcome]:
        """Ask the supervisor to reload every worker (SIGHUP, as ``localgate reload``
        does); each worker's outcome once all have reported or ``timeout_s`` has passed."""
        before = await self.configs()
        try:
            os.kill(self._supervisor_pid, signal.SIGHUP)
        except ProcessLookupError as exc:
            raise FailedPrecondition(
                f"The workers' supervisor (pid {self._supervisor_pid}) is gone; nothing "
                "was reloaded."
            ) from exc
        deadline = self._clock() + timeout_s
        while True:
            final = self._clock() >= deadline
            outcomes = reload_outcomes(before, await self.configs(), self.count, final=final)
            if outcomes is not None:
                return outcomes
            await asyncio.sleep(_POLL_S)
