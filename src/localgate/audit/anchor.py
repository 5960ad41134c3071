"""What verification trusts beyond the database: signed tenant lists and the external anchor.

A database administrator can delete rows, so whatever sits only in the database can
vanish together with the records it vouches for. Two things make such deletions show:

- the **tenant list**: a signed note naming every tenant whose log was ever signed. The
  checkpointer writes a new one, carrying the previous names forward, whenever a tenant
  is signed for the first time; a deleted tenant stays named in every later list::

      localgate audit tenants
      log localgate
      time 2026-12-01T09:00:00Z
      acme
      globex

- the **anchor**: the folder the checkpointer exports to (``audit.checkpoint_export_dir``,
  or ``audit verify --checkpoints DIR``), which must be somewhere the administrator cannot
  write (another host, WORM storage). Its layout is ``<tenant>/<size>.note`` for each
  signed checkpoint and ``tenants-<time>-<digest>.note`` for each signed tenant list.
  Verification reports every tenant, checkpoint and record the anchor knows and the
  database lacks.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from localgate.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointSigner,
    CheckpointVerifier,
    note_text,
)

__all__ = [
    "Anchor",
    "TenantList",
    "export_note",
    "newest",
    "read_anchor",
    "tenant_list_file",
]

TENANTS_HEADER = "localgate audit tenants"
_SIZE_FILE = re.compile(r"[0-9]{1,20}\.note")
_TIME_LINE = re.compile(r"time ([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})Z")


@dataclass(frozen=True)
class TenantList:
    """Every tenant a log had signed, as of ``time``: what a signed tenant list says."""

    log_name: str
    tenants: frozenset[str]
    time: datetime

    def body(self) -> str:
        """The note text that is signed (tenants sorted, one per line)."""
        moment = self.time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        names = "".join(f"{tenant}\n" for tenant in sorted(self.tenants))
        return f"{TENANTS_HEADER}\nlog {self.log_name}\ntime {moment}Z\n{names}"

    def sign(self, signer: CheckpointSigner) -> str:
        """The signed note."""
        return signer.sign_note(self.body())

    @classmethod
    def parse(cls, text: str) -> TenantList:
        """The list in a note's text; ``CheckpointError`` if it is not one."""
        lines = text.rstrip("\n").split("\n")
        if len(lines) < 3 or lines[0] != TENANTS_HEADER or not lines[1].startswith("log "):
            raise CheckpointError("not a signed tenant list")
        match = _TIME_LINE.fullmatch(lines[2])
        if match is None:
            raise CheckpointError("malformed tenant list: line 3 is not its time")
        try:
            time = datetime.fromisoformat(match.group(1)).replace(tzinfo=UTC)
        except ValueError as exc:
            raise CheckpointError("malformed tenant list: line 3 is not a valid time") from exc
        return cls(lines[1].removeprefix("log "), frozenset(lines[3:]), time)

    @classmethod
    def open(cls, note: str, verifier: CheckpointVerifier | None) -> TenantList:
        """The list in a signed note, once its signature verifies (unchecked without a key)."""
        return cls.parse(verifier.open_note(note) if verifier else note_text(note))


def newest(lists: list[TenantList]) -> TenantList | None:
    """The most recently signed list (the union on a tie: they were signed together)."""
    if not lists:
        return None
    last = max(lists, key=lambda item: item.time)
    names = frozenset().union(*(item.tenants for item in lists if item.time == last.time))
    return TenantList(last.log_name, names, last.time)


@dataclass
class Anchor:
    """What an external anchor folder holds.

    Signatures are checked where they matter: each tenant's newest exported checkpoint
    (its root commits to every record before it, so older ones add nothing to the tree
    check), every tenant list, and any checkpoint the database turns out to lack (see
    ``open``). The other files are matched by the size in their name, so verification
    does not pay one signature check per minute of history.
    """

    folder: Path
    verifier: CheckpointVerifier | None = None
    # Per tenant, the exported checkpoint files by tree size (``<size>.note``).
    sizes: dict[str, dict[int, Path]] = field(default_factory=dict)
    # Per tenant, its newest exported checkpoint that verifies.
    checkpoints: dict[str, list[Checkpoint]] = field(default_factory=dict)
    lists: list[TenantList] = field(default_factory=list)
    # Files that are not what they claim: (file, reason); verification reports them.
    bad: list[tuple[str, str]] = field(default_factory=list)

    def tenants(self) -> set[str]:
        """Every tenant the anchor knows: a folder of checkpoints, or a name in a list."""
        names = set(self.sizes)
        for item in self.lists:
            names |= item.tenants
        return names

    def open(self, tenant: str, size: int) -> Checkpoint:
        """The exported checkpoint of ``size`` records, once it verifies (``CheckpointError``)."""
        path = self.sizes[tenant][size]
        try:
            note = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"cannot read it: {exc}") from exc
        checkpoint = (
            self.verifier.verify(note) if self.verifier else Checkpoint.parse(note_text(note))
        )
        # As in the database: any log name (it may have been renamed), this tenant.
        if not checkpoint.origin.endswith(f"/audit/{tenant}"):
            raise CheckpointError(f"it is a checkpoint of {checkpoint.origin}")
        if checkpoint.size != size:
            raise CheckpointError(f"it holds the checkpoint of {checkpoint.size} records")
        return checkpoint


def read_anchor(folder: Path, verifier: CheckpointVerifier | None, log_name: str) -> Anchor:
    """Read the checkpoints and tenant lists exported to ``folder``.

    ``FileNotFoundError`` if the folder does not exist: an anchor that vanished is not an
    empty anchor.
    """
    if not folder.is_dir():
        raise FileNotFoundError(f"the checkpoint folder {folder} does not exist")
    anchor = Anchor(folder, verifier)
    for path in sorted(folder.iterdir()):
        if path.is_dir():
            _read_tenant(anchor, path)
        elif path.name.startswith("tenants-") and path.suffix == ".note":
            try:
                listed = TenantList.open(path.read_text(encoding="utf-8"), verifier)
            except (CheckpointError, OSError, UnicodeDecodeError) as exc:
                anchor.bad.append((path.name, str(exc)))
                continue
            if listed.log_name == log_name:
                anchor.lists.append(listed)
    return anchor


def _read_tenant(anchor: Anchor, folder: Path) -> None:
    tenant = folder.name
    sizes = anchor.sizes.setdefault(tenant, {})
    for path in folder.glob("*.note"):
        if not _SIZE_FILE.fullmatch(path.name):
            anchor.bad.append((f"{tenant}/{path.name}", "not a checkpoint file name"))
            continue
        sizes[int(path.stem)] = path
    # The newest that verifies; a newer one that does not is reported, not trusted.
    for size in sorted(sizes, reverse=True):
        try:
            anchor.checkpoints[tenant] = [anchor.open(tenant, size)]
        except CheckpointError as exc:
            anchor.bad.append((f"{tenant}/{sizes[size].name}", str(exc)))
            continue
        return


def export_note(folder: Path, name: str, note: str) -> None:
    """Write one signed note into the anchor folder (``name`` relative to it)."""
    target = folder / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(note, encoding="utf-8")


def tenant_list_file(listed: TenantList, note: str) -> str:
    """The anchor file name of a signed tenant list: its time, then a digest (unique)."""
    digest = hashlib.sha256(note.encode("utf-8")).hexdigest()[:12]
    return f"tenants-{listed.time.strftime('%Y%m%dT%H%M%SZ')}-{digest}.note"
