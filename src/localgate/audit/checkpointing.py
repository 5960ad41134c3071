"""Signing each tenant's log head periodically, and exporting the signed checkpoints.

The gateway does this every ``audit.checkpoint_interval_s`` when it can read the
signing key; an operator who keeps the key away from the gateway replicas runs
``localgate audit checkpoint`` from the signer's host (e.g. from cron) instead.
Exported checkpoints go where the database administrator cannot write, so a rewritten
log cannot be made to match them.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

from localgate.audit.checkpoint import Checkpoint, CheckpointSigner, note_text
from localgate.audit.merkle import Frontier, TreeHasher, root_of
from localgate.audit.store import AuditReader

__all__ = ["Checkpointer", "origin_of"]

logger = logging.getLogger("localgate.audit")


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
        # The frontier as of this checkpointer's last signature, per tenant.
        self._signed: dict[str, Frontier] = {}

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
            if not self._extends_what_was_signed(tenant, frontier, signed):
                logger.error(
                    "audit: the log of %s does not extend what was signed before; "
                    "refusing to sign it (run `localgate audit verify`)",
                    tenant,
                )
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

    def _extends_what_was_signed(
        self, tenant: str, frontier: Frontier, signed: list[tuple[int, str]]
    ) -> bool:
        """Whether the stored head is the signed history plus appended leaves.

        The first time (per process) the whole log is read and checked against the last
        stored checkpoint; after that only the leaves appended since the last signature
        are read, and the frontier this checkpointer signed is extended with them.
        Without this, whoever can write the database could rewrite history, drop the
        checkpoints and have the gateway sign the forgery.
        """
        mine = self._signed.get(tenant)
        if mine is None:
            leaves = self._reader.leaf_hashes(tenant, frontier.size)
            if len(leaves) != frontier.size:
                return False
            if signed:
                size, note = signed[-1]
                checkpoint = Checkpoint.parse(note_text(note))
                if size > len(leaves) or root_of(self._hasher, leaves[:size]) != checkpoint.root:
                    return False
            mine = Frontier(self._hasher)
            for leaf in leaves:
                mine.append(leaf)
        else:
            mine = Frontier(self._hasher, mine.size, mine.hashes)
            added = self._reader.leaf_hashes_between(tenant, mine.size, frontier.size)
            if len(added) != frontier.size - mine.size:
                return False
            for leaf in added:
                mine.append(leaf)
        if mine.root() != frontier.root():
            return False
        self._signed[tenant] = mine
        return True

    def _export(self, tenant: str, size: int, note: str) -> None:
        if self._export_dir is None:
            return
        folder = self._export_dir / tenant
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{size:012d}.note").write_text(note, encoding="utf-8")
