"""Signing each tenant's log head periodically, and exporting the signed checkpoints.

The gateway does this every ``audit.checkpoint_interval_s`` when it can read the
signing key; an operator who keeps the key away from the gateway replicas runs
``localgate audit checkpoint`` from the signer's host (e.g. from cron) instead.
Exported checkpoints go where the database administrator cannot write, so a rewritten
log cannot be made to match them. Beside the checkpoints it keeps a signed tenant list
(``anchor.TenantList``), so that a tenant deleted whole stays visible.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

from localgate.audit.anchor import TenantList, export_note, newest, tenant_list_file
from localgate.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointSigner,
    CheckpointVerifier,
)
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
        # The tenants of the last list this checkpointer signed.
        self._listed: frozenset[str] = frozenset()

    def run(self) -> list[tuple[str, int]]:
        """Sign what is new; returns (tenant, size) of each checkpoint made.

        The checkpoints and the tenant list they need are stored in one transaction,
        then exported: verification relies on a list never lagging a checkpoint.
        """
        made: list[tuple[str, int, str]] = []
        signed_tenants: set[str] = set()
        for tenant in self._reader.tenants():
            state = self._reader.frontier_state(tenant)
            if state is None:
                continue
            frontier = Frontier.from_bytes(self._hasher, state)
            signed = self._newest_valid(tenant)
            if signed:
                signed_tenants.add(tenant)
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
            made.append((tenant, frontier.size, self._signer.sign(checkpoint)))
            signed_tenants.add(tenant)
        listed = self._tenant_list(signed_tenants)
        if not made and listed is None:
            return []
        stored: list[tuple[str, int, str]] = []
        self._reader.db.begin()
        try:
            for tenant, size, note in made:
                # A row someone inserted at this size keeps it (the table is append-only):
                # ours is then neither stored nor exported; the next round signs a larger one.
                if self._reader.add_checkpoint(tenant, size, note):
                    stored.append((tenant, size, note))
            if listed is not None:
                self._reader.add_tenant_list(listed[1])
            self._reader.db.commit()
        except Exception:
            self._reader.db.rollback()
            raise
        if listed is not None:
            self._listed = listed[0].tenants
        for tenant, size, note in stored:
            self._export(f"{tenant}/{size:012d}.note", note)
        if listed is not None:
            self._export(tenant_list_file(*listed), listed[1])
        return [(tenant, size) for tenant, size, _ in stored]

    def _newest_valid(self, tenant: str) -> list[tuple[int, str]]:
        """The newest stored checkpoint this log's key signed, as a one-item list (or none).

        Others are skipped: a checkpoint someone inserted (or a replica with another key
        signed) must neither stop signing nor become the base the log is checked against.
        """
        verifier = self._signer.verifier()
        for size, note in reversed(self._reader.checkpoints(tenant)):
            try:
                verifier.verify(note)
            except CheckpointError:
                continue
            return [(size, note)]
        return []

    def _tenant_list(self, signed_tenants: set[str]) -> tuple[TenantList, str] | None:
        """A new signed tenant list, if the newest one stored lacks a tenant it should name.

        Names are carried forward from the newest stored list, from the anchor's newest
        (so a tenant deleted from the database together with its lists is named again)
        and from what this process listed itself.
        """
        verifier = self._signer.verifier()
        stored = [
            opened
            for opened in (_open(note, verifier) for note in self._reader.newest_tenant_lists())
            if opened is not None
        ]
        if not stored:
            # None of the newest verifies: lists someone inserted with later times may have
            # pushed the genuine ones out of the newest few; read them all.
            stored = [
                opened
                for opened in (_open(note, verifier) for note in self._reader.tenant_lists())
                if opened is not None
            ]
        latest = newest(stored)
        known = latest.tenants if latest else frozenset()
        wanted = known | self._listed | signed_tenants
        if self._export_dir is not None:
            exported = sorted(self._export_dir.glob("tenants-*.note"))
            if exported:
                anchored = _open(exported[-1].read_text(encoding="utf-8"), verifier)
                if anchored is not None:
                    wanted |= anchored.tenants
        if not wanted or wanted == known:
            return None
        listed = TenantList(
            self._log_name, frozenset(wanted), datetime.now(UTC).replace(microsecond=0)
        )
        if latest is not None and listed.time <= latest.time:
            # Newest by signed time decides: never sign one that would not be newest.
            listed = TenantList(self._log_name, listed.tenants, latest.time + timedelta(seconds=1))
        return listed, listed.sign(self._signer)

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
                try:
                    # Only our own signature makes a stored checkpoint the base to extend.
                    checkpoint = self._signer.verifier().verify(note)
                except CheckpointError:
                    return False
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

    def _export(self, name: str, note: str) -> None:
        if self._export_dir is not None:
            export_note(self._export_dir, name, note)


def _open(note: str, verifier: CheckpointVerifier) -> TenantList | None:
    try:
        return TenantList.open(note, verifier)
    except CheckpointError:
        return None  # not ours: verify reports it
