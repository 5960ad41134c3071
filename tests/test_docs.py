"""Every setting and command a user can reach is documented."""

from __future__ import annotations

from pathlib import Path

import click
from pydantic import BaseModel

from localgate.cli import main
from localgate.config import Settings

ROOT = Path(__file__).parent.parent


def setting_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths += setting_paths(annotation, f"{prefix}{name}.")
        else:
            paths.append(f"{prefix}{name}")
    return paths


def test_every_setting_is_in_the_example_config() -> None:
    example = (ROOT / "config" / "localization.yaml").read_text()
    lines = [line.split("#")[0] for line in example.splitlines()]
    keys = {line.strip().split(":")[0] for line in lines if ":" in line}

    missing = [path for path in setting_paths(Settings) if path.split(".")[-1] not in keys]

    assert missing == []


def test_every_cli_command_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()

    def commands(group: click.Group, prefix: str) -> list[str]:
        found = []
        context = click.Context(group)
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            assert command is not None, name
            if isinstance(command, click.Group):
                found += commands(command, f"{prefix}{name} ")
            else:
                found.append(f"{prefix}{name}")
        return found

    missing = [c for c in commands(main, "localgate ") if c not in readme]

    assert missing == []
