"""The compiled detection core and request rewrite: used only for the sources they came from.

``make run`` and ``make test`` install localgate with the detection modules (``COMPILED``)
compiled to C by mypyc (``setup.py``): the same source, type-checked and compiled, about a
sixth less CPU per detection (docs/benchmarks.md). The Python source stays the reference:
the compiled modules are imported only if every one of them was compiled from the source
that is on disk now (the build records their SHA-256 digests in ``_native.json``). A
module edited, or a checkout moved to another commit, since the last build would
otherwise run stale detection code, silently: then the sources run as they are, and
``status()`` says why (``localgate serve`` logs it at start).

``LOCALGATE_PURE_PYTHON=1`` in the environment runs the sources in any case; the
equivalence test runs both side by side (tests/redaction/test_native.py).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

__all__ = [
    "COMPILED",
    "RECORD",
    "NativeStatus",
    "install",
    "pure_python_requested",
    "source_digest",
    "status",
]

# The modules the build compiles, all or none: compiled modules call each other directly,
# so a mix of compiled and interpreted ones would not be one program.
COMPILED = (
    "findings",
    "validators",
    "fold",
    "reveal",
    "recognizers",
    "names",
    "placeholders",
    "session",
    "request",
    "answer",
    "signatures",
)
# What the build writes beside them: the digests of the sources it compiled.
RECORD = "_native.json"
_PACKAGE = __name__.rpartition(".")[0]
_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class NativeStatus:
    """Whether the compiled modules are in use, and why (not)."""

    compiled: bool
    reason: str


def source_digest(path: Path) -> str:
    """What the build records for a source file and this module checks."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pure_python_requested() -> bool:
    """``LOCALGATE_PURE_PYTHON`` set (to anything but 0): run, or install, the sources."""
    return os.environ.get("LOCALGATE_PURE_PYTHON", "") not in ("", "0")


@cache
def status() -> NativeStatus:
    """Decided once per process, before the first of the modules is imported."""
    if pure_python_requested():
        return NativeStatus(False, "pure Python: LOCALGATE_PURE_PYTHON is set")
    try:
        record = json.loads((_HERE / RECORD).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return NativeStatus(False, "pure Python: the detection core is not compiled")
    except (OSError, ValueError) as error:
        return NativeStatus(False, f"pure Python: {RECORD} is unreadable ({error})")
    sources = record.get("sources") if isinstance(record, dict) else None
    if not isinstance(sources, dict):
        return NativeStatus(False, f"pure Python: {RECORD} lists no sources")
    extensions = importlib.machinery.FileFinder(
        str(_HERE),
        (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
    )
    for name in COMPILED:
        if extensions.find_spec(f"{_PACKAGE}.{name}") is None:
            return NativeStatus(False, f"pure Python: {name} has no compiled module")
        source = _HERE / f"{name}.py"
        if source.exists() and sources.get(name) != source_digest(source):
            return NativeStatus(
                False,
                f"pure Python: {name}.py changed since it was compiled "
                "(run `make run` or `pip install -e .` to compile it again)",
            )
    return NativeStatus(True, f"compiled with mypyc {record.get('mypy', '?')}")


class _Sources(importlib.abc.MetaPathFinder):
    """Finds the modules in ``COMPILED`` as Python sources, ahead of their extensions."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != _PACKAGE or name not in COMPILED:
            return None
        return importlib.util.spec_from_file_location(fullname, _HERE / f"{name}.py")


def install() -> None:
    """Make the imports of the compiled modules follow ``status()``; idempotent."""
    if status().compiled or any(isinstance(finder, _Sources) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _Sources())
