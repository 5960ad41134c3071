"""The deployment files' paths and the validators the tests run (installed by the dev extra)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
KUBERNETES = ROOT / "deploy" / "kubernetes"
MAKE_KEYS = ROOT / "deploy" / "compose" / "make-keys.sh"


def tool(name: str) -> str:
    """The executable ``name`` beside this Python (the dev extra installs it there), else on
    PATH; missing, the test fails under CI=true and is skipped elsewhere."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        message = f"{name} is missing: `make test` installs it (the dev extra, or make tools)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def load_yaml(path: Path) -> Any:
    """One YAML document."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def load_all_yaml(path: Path) -> list[Any]:
    """Every document of a YAML file (empty ones left out)."""
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def make_keys(folder: Path) -> dict[str, Path]:
    """Run the compose stack's key script into ``folder`` (owned by this user); returns its
    folders: ``keys``, ``postgres`` (the database password), ``grafana``."""
    folders = {name: folder / name for name in ("keys", "postgres", "grafana")}
    for path in folders.values():
        path.mkdir(exist_ok=True)
    bin_dir = Path(tool("localgate")).parent
    environment = {
        **os.environ,
        "LOCALGATE_KEYS_DIR": str(folders["keys"]),
        "LOCALGATE_POSTGRES_SECRET_DIR": str(folders["postgres"]),
        "LOCALGATE_GRAFANA_SECRET_DIR": str(folders["grafana"]),
        "LOCALGATE_KEYS_OWNER": f"{os.getuid()}:{os.getgid()}",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "LOCALGATE_CONFIG": "",
        "LOCALGATE_DATA_DIR": str(folder / "keygen-data"),
    }
    result = subprocess.run(  # noqa: S603 - the repository's script
        ["/bin/sh", str(MAKE_KEYS)], env=environment, capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    return folders
