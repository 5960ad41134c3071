"""Compiles the detection core with mypyc when localgate is installed (pyproject.toml has the
rest of the build settings).

Detection is half the gateway's CPU per request (docs/benchmarks-stages.md). mypyc compiles
the same type-checked Python to a C extension: no second implementation to keep in step, and
the source stays the reference (src/localgate/redaction/native.py runs it instead whenever
it differs from what was compiled, or ``LOCALGATE_PURE_PYTHON=1`` is set at run time).
``LOCALGATE_PURE_PYTHON=1`` at install time skips the compilation.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "src" / "localgate" / "redaction"


def _native() -> ModuleType:
    """``localgate.redaction.native`` (the list of compiled modules, the record's name, the
    digest, the pure-Python switch), loaded on its own: it needs only the standard library,
    and the package cannot be imported before it is built."""
    spec = importlib.util.spec_from_file_location("_localgate_native", PACKAGE / "native.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {PACKAGE / 'native.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


native = _native()


class BuildWithRecord(build_ext):
    """build_ext, then the digests of the compiled sources beside the extensions."""

    def run(self) -> None:
        try:
            super().run()
        except (BaseError, CCompilerError, OSError) as error:
            # No C compiler (or a broken one): localgate still installs, and runs its
            # detection from source (native.status() says so at start).
            _warn(f"the detection core was not compiled ({error}); it runs as Python")
            return
        import mypy.version

        record = {
            "mypy": mypy.version.__version__,
            "sources": {
                name: native.source_digest(PACKAGE / f"{name}.py") for name in native.COMPILED
            },
        }
        text = json.dumps(record, indent=1, sort_keys=True) + "\n"
        targets = [Path(self.build_lib) / "localgate" / "redaction"]
        if self.inplace or self.editable_mode:
            targets.append(PACKAGE)
        for target in targets:
            target.mkdir(parents=True, exist_ok=True)
            (target / native.RECORD).write_text(text, encoding="utf-8")


def _warn(message: str) -> None:
    print(f"localgate setup.py: warning: {message}", file=sys.stderr)


def _extensions() -> list[object]:
    if native.pure_python_requested():
        return []
    from mypyc.build import mypycify

    paths = [str((PACKAGE / f"{name}.py").relative_to(HERE)) for name in native.COMPILED]
    # Its own settings, not the project's [tool.mypy] (whose plugins and other modules the
    # isolated build environment does not have): the compiled modules need only the
    # standard library, re2 and rjieba, which have no type information.
    options = ["--config-file", "", "--ignore-missing-imports", "--follow-imports=silent"]
    try:
        return list(mypycify([*options, *paths], group_name="localgate_native", opt_level="3"))
    except SystemExit:  # mypyc found a type error (make lint tells which)
        _warn("mypyc refused the detection modules; they run as Python")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildWithRecord})
