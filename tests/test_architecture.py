"""The package layout holds: the import contracts in pyproject.toml, checked by import-linter.

docs/architecture.md draws the layers; these tests fail when the code stops matching it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(source: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - the project's own tool, fixed arguments
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=source,
        env={"PYTHONPATH": str(source), "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_the_packages_import_only_downwards_and_never_in_a_cycle() -> None:
    result = _lint_imports(ROOT / "src")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_stage_importing_the_pipeline_or_a_front_door_is_caught(tmp_path: Path) -> None:
    for importer, imported in [
        ("redaction/stage.py", "localgate.pipeline"),
        ("cache/stage.py", "localgate.frontdoor.endpoint"),
        ("gemini/routes.py", "localgate.exchange.context"),
    ]:
        copy = tmp_path / importer.replace("/", "_")
        shutil.copytree(ROOT / "src" / "localgate", copy / "localgate")
        with (copy / "localgate" / importer).open("a") as module:
            module.write(f"\nimport {imported}  # noqa\n")

        result = _lint_imports(copy)

        assert result.returncode != 0, importer
        assert f"is not allowed to import {imported.rsplit('.', 1)[0]}" in result.stdout or (
            f"is not allowed to import {imported}" in result.stdout
        ), result.stdout
