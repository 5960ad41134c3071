"""Signing each tenant's log head periodically, and exporting the signed checkpoints.

The gateway does this every ``audit.checkpoint_interval_s`` when it can read the
signing key; an operator who keeps the key away from the gateway replicas runs
``localgate audit checkpoint`` from the signer's host (e.g. from cron) instead.
Exported checkpoints go where the database administrator cannot write, so a rewritten
log cannot be made to match them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from localgate.audit.checkpoint import Checkpoint, CheckpointSigner
from localgate.audit.merkle import Frontier, TreeHasher
from localgate.audit.store import AuditReader

__all__ = ["Checkpointer", "origin_of"]


def origin_of(log_name: str, tenant: str) -> str:
    """The checkpoint origin line of a tenant's log."""
    return f"{log_name}/audit/{tenant}"


class Checkpointer:
    """Signs the head of every tenant's log that grew since its last checkpoint."""

    def __init__(
        self,
        reader: AuditReader,
        hasher: TreeHasher,
        signer: CheckpointSigner,
        log_name: str,
        export_dir: Path | None = None,
    ) -> None:
        self._reader = reader
        self._hasher = hasher
        self._signer = signer
        self._log_name = log_name
        self._export_dir = export_dir

    def run(self) -> list[tuple[str, int]]:
        """Sign what is new; returns (tenant, size) of each checkpoint made."""
        made = []
        for tenant in self._reader.tenants():
            state = self._reader.frontier_state(tenant)
            if state is None:
                continue
            frontier = Frontier.from_bytes(self._hasher, state)
            signed = self._reader.checkpoints(tenant)
            if frontier.size == 0 or (signed and signed[-1][0] >= frontier.size):
                continue
            checkpoint = Checkpoint(
                origin=origin_of(self._log_name, tenant),
                size=frontier.size,
                root=frontier.root(),
                time=datetime.now(UTC).replace(microsecond=0),
            )
            note = self._signer.sign(checkpoint)
            self._reader.add_checkpoint(tenant, frontier.size, note)
            self._export(tenant, frontier.size, note)
            made.append((tenant, frontier.size))
        return made

    def _export(self, tenant: str, size: int, note: str) -> None:
        if self._export_dir is None:
            return
        folder = self._export_dir / tenant
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{size:012d}.note").write_text(note, encoding="utf-8")
