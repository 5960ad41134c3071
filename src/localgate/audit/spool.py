"""Completion records that could not be written wait here, encrypted, until they can.

A completion record is never dropped: if the store refuses it, it is appended to a
spool file (each line sealed with the master key, so nothing is in clear on disk) and
retried in order until the store takes it. If the spool cannot be written either (the
disk is full), the audit stage holds the record in memory and the gateway refuses
requests until it is written (``stage.py``).

Several gateway processes may share one data directory (``--workers``), so one spool file:
every read-modify-write of it holds an ``flock`` on ``<spool>.lock`` (an append by one process
is never lost to another's rewrite), and one process at a time drains it (``draining``), so a
spooled record is written to the store once.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import orjson

from localgate.audit.crypto import DecryptionError, MasterKey
from localgate.audit.records import PendingRecord

__all__ = ["Spool"]

_LABEL = "localgate-audit-spool"


class Spool:
    """An append-only file of sealed pending records."""

    def __init__(self, path: Path, master: MasterKey) -> None:
        self.path = path
        self._master = master
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def add(self, record: PendingRecord) -> None:
        """Append ``record`` durably (fsync before returning)."""
        fields = asdict(record)
        for name in ("payload", "original", "prompt", "sent"):
            value = fields[name]
            fields[name] = base64.b64encode(value).decode() if value is not None else None
        sealed = self._master.wrap(orjson.dumps(fields), _LABEL)
        with self._lock, self._locked():
            self._append(base64.b64encode(sealed) + b"\n")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The spool file to this process (other processes wait)."""
        descriptor = os.open(self._lock_path(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    @contextlib.contextmanager
    def draining(self) -> Iterator[bool]:
        """Whether this caller may drain the spool now (take, write, clear): True for one
        caller at a time across processes; others get False and leave it to that one."""
        descriptor = os.open(self._lock_path(".drain.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(descriptor)

    def _lock_path(self, suffix: str) -> Path:
        return self.path.with_name(self.path.name + suffix)

    def _append(self, line: bytes) -> None:
        """Append one line and fsync it; ``OSError`` (ENOSPC, EIO, ...) if the disk refuses.

        A short write (the disk filled up mid-line) is cut off again, so a line is in
        the spool whole or not at all.
        """
        descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            size = os.fstat(descriptor).st_size
            try:
                written = os.write(descriptor, line)
                if written != len(line):
                    raise OSError(errno.ENOSPC, "short write to the audit spool")
                os.fsync(descriptor)
            except OSError:
                # If even this fails, take() quarantines the torn line later.
                with contextlib.suppress(OSError):
                    os.ftruncate(descriptor, size)
                raise
        finally:
            os.close(descriptor)

    def take(self) -> list[PendingRecord]:
        """Everything spooled, oldest first (the file stays until ``clear``).

        A line that does not open — torn by a crash, or sealed under a master key that
        has since been rotated — is moved to ``<spool>.quarantine`` (recoverable with that
        key) instead of blocking every record behind it.
        """
        with self._lock, self._locked():
            if not self.path.exists():
                return []
            lines = [line for line in self.path.read_bytes().splitlines() if line.strip()]
            records: list[PendingRecord] = []
            good: list[bytes] = []
            bad: list[bytes] = []
            for line in lines:
                try:
                    fields = orjson.loads(self._master.unwrap(base64.b64decode(line), _LABEL))
                except (DecryptionError, ValueError):
                    bad.append(line)
                    continue
                for name in ("payload", "original", "prompt", "sent"):
                    if fields[name] is not None:
                        fields[name] = base64.b64decode(fields[name])
                records.append(PendingRecord(**fields))
                good.append(line)
            if bad:
                with self.path.with_suffix(".quarantine").open("ab") as quarantine:
                    quarantine.write(b"".join(line + b"\n" for line in bad))
                    quarantine.flush()
                    os.fsync(quarantine.fileno())
                self._rewrite(good)
        return records

    def clear(self, count: int) -> None:
        """Drop the first ``count`` lines (they have been written)."""
        with self._lock, self._locked():
            if not self.path.exists():
                return
            lines = [line for line in self.path.read_bytes().splitlines() if line.strip()]
            self._rewrite(lines[count:])

    def _rewrite(self, lines: list[bytes]) -> None:
        """Replace the spool's content atomically and durably (caller holds the lock)."""
        if not lines:
            self.path.unlink(missing_ok=True)
            return
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with temporary.open("wb") as handle:
            handle.write(b"".join(line + b"\n" for line in lines))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)

    def __len__(self) -> int:
        with self._lock, self._locked():
            if not self.path.exists():
                return 0
            return sum(1 for line in self.path.read_bytes().splitlines() if line.strip())
