"""The container image's Dockerfile keeps its promises: checked statically (no Docker engine
is needed): hadolint, and the file's own structure."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import click
from dockerfile_parse import DockerfileParser

from localgate.app.operations import OPERATIONS
from localgate.cli import main
from localgate.config import load_settings
from tests.deploy.tools import ROOT, tool

DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[dict[str, Any]]:
    parser = DockerfileParser(str(DOCKERFILE))
    return [dict(i) for i in parser.structure if i["instruction"] != "COMMENT"]


def stages() -> list[list[dict[str, Any]]]:
    """The instructions of each stage, from its FROM on."""
    found: list[list[dict[str, Any]]] = []
    for instruction in instructions():
        if instruction["instruction"] == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def values(stage: list[dict[str, Any]], name: str) -> list[str]:
    return [i["value"] for i in stage if i["instruction"] == name]


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(  # noqa: S603 - hadolint on the repository's Dockerfile
        [tool("hadolint"), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_is_built_in_one_stage_and_run_from_a_slim_second_one() -> None:
    build, runtime = stages()

    assert values(build, "FROM")[0].endswith(" AS build")
    assert values(runtime, "FROM")[0].endswith(" AS runtime")
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in DOCKERFILE.read_text()
    # No `# syntax=` line: the builder's own frontend, no image pulled from Docker Hub.
    assert "syntax=" not in DOCKERFILE.read_text().splitlines()[0]
    # The runtime stage takes the wheels from the build stage only, and no compiler.
    runs = " ".join(values(runtime, "RUN"))
    assert "from=build" in runs
    assert not re.search(r"apt-get|gcc|build-essential", runs)


def test_only_the_runtime_dependencies_are_installed_never_an_extra() -> None:
    build, runtime = stages()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    # The wheel set is localgate and what its [project] dependencies pull in: pip wheel of
    # the project itself, with no extra.
    # pip's configuration and a CA bundle may come in as build secrets, nothing else.
    compiler, wheel = values(build, "RUN")
    # Before it, the C compiler for the compiled detection core, in the build stage only.
    assert "apt-get install -y --no-install-recommends gcc libc6-dev" in compiler
    assert wheel.endswith("&& pip wheel --wheel-dir /wheels .")
    mounts = re.findall(r"--mount=(\S+)", wheel)
    assert mounts == [
        "type=secret,id=pip.conf,target=/etc/pip.conf",
        "type=secret,id=ca-bundle,target=/run/secrets/ca-bundle",
    ]
    # The runtime installs that wheel, offline from that set: nothing else can come in.
    (install,) = [run for run in values(runtime, "RUN") if "pip install" in run]
    command = install.split("pip install", 1)[1].split()
    assert command == ["--no-index", "--find-links=/mnt", "/mnt/localgate-*.whl"]
    assert "--mount=type=bind,from=build,source=/wheels,target=/mnt" in install
    # No extra anywhere (dev tools, or the semantic embedder and its torch).
    text = DOCKERFILE.read_text()
    for extra in project["optional-dependencies"]:
        assert f"[{extra}]" not in text
    assert "torch" not in text.replace("semantic embedder's torch", "")
    assert not any(dep.startswith("torch") for dep in project["dependencies"])


def test_it_runs_as_an_unprivileged_user_with_its_volumes_and_a_health_check() -> None:
    _, runtime = stages()

    (user,) = values(runtime, "USER")
    assert user.split(":")[0] not in ("0", "root")
    assert values(runtime, "VOLUME") == ['["/etc/localgate", "/var/lib/localgate"]']
    (check,) = values(runtime, "HEALTHCHECK")
    assert "CMD" in check
    assert "http://127.0.0.1:8080/healthz" in check
    assert values(runtime, "EXPOSE") == ["8080"]
    # The health check's path is one the gateway serves.
    assert "/healthz" in OPERATIONS


def test_the_entrypoint_is_localgate_serve_on_every_interface_and_the_cli_accepts_it() -> None:
    _, runtime = stages()

    assert json.loads(values(runtime, "ENTRYPOINT")[0]) == ["localgate"]
    command = json.loads(values(runtime, "CMD")[0])
    assert command == ["serve", "--host", "0.0.0.0", "--port", "8080"]  # noqa: S104
    group = main.make_context("localgate", list(command), resilient_parsing=False)
    serve = main.get_command(group, command[0])
    assert isinstance(serve, click.Command)
    parsed = serve.make_context("serve", command[1:], parent=group)
    assert parsed.params["host"] == "0.0.0.0"  # noqa: S104
    assert parsed.params["port"] == 8080


def test_the_image_s_configuration_is_valid_and_listens_everywhere() -> None:
    _, runtime = stages()
    env = " ".join(values(runtime, "ENV"))
    assert "LOCALGATE_CONFIG=/etc/localgate/localgate.yaml" in env
    assert "LOCALGATE_DATA_DIR=/var/lib/localgate" in env
    copied = [c for c in values(runtime, "COPY") if c.endswith(" /etc/localgate/localgate.yaml")]
    (source,) = [Path(c.split()[-2]) for c in copied]

    settings, _ = load_settings(ROOT / source, {})

    assert settings.server.host == "0.0.0.0"  # noqa: S104
    assert settings.server.port == 8080
    assert str(settings.data_dir) == "/var/lib/localgate"


def test_the_build_context_is_only_what_the_dockerfile_copies() -> None:
    ignore = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = {
        part.rstrip("/")
        for instruction in instructions()
        if instruction["instruction"] == "COPY" and "--from" not in instruction["value"]
        for part in instruction["value"].split()[:-1]
        if not part.startswith("--")
    }
    included = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}

    # Everything is left out (data/, .venv/, keys, .git) but what is named back in...
    assert ignore[0] == "*"
    # ...which is what the Dockerfile copies, and each of those exists.
    assert all(any(c == i or c.startswith(f"{i}/") for i in included) for c in copied), copied
    for path in copied:
        assert (ROOT / path).exists(), path
    assert included == {"pyproject.toml", "setup.py", "README.md", "src", "deploy/docker"}


def test_the_wheel_the_image_installs_carries_every_file_of_the_package() -> None:
    """The image runs localgate from its wheel, not from the source tree: a module outside a
    package (no __init__.py) or a data file outside package-data would be missing there
    while every test run from the tree passes."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["localgate"]
    package = ROOT / "src" / "localgate"
    files = [
        path
        for path in package.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix != ".pyc"
        # What the build makes (the compiled detection core and its record), not package data.
        and path.suffix != ".so"
        and path.name != "_native.json"
    ]

    assert setuptools["packages"]["find"]["where"] == ["src"]
    for path in files:
        relative = path.relative_to(package)
        if path.suffix == ".py":
            # find_packages takes a folder only if it (and each parent) is a package.
            for folder in relative.parents:
                assert (package / folder / "__init__.py").exists(), relative
        else:
            assert any(relative.match(pattern) for pattern in patterns), relative
