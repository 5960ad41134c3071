"""Every setting and command a user can reach is documented."""

from __future__ import annotations

import re
from pathlib import Path

import click
from pydantic import BaseModel

from localgate.cli import main
from localgate.config import Settings
from localgate.observability import GatewayMetrics

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


def documentation() -> str:
    """The README and every page under docs/, as one text."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(page.read_text() for page in pages)


# What the exposition appends to a family's name for the series a user sees.
_SUFFIX = {"counter": "_total", "info": "_info"}


def exposed_metrics() -> dict[str, str]:
    """Every metric the gateway's /metrics shows, by the name a user sees (counters with
    ``_total``), and its type."""
    return {
        family.name + _SUFFIX.get(family.type, ""): family.type
        for family in GatewayMetrics().registry.collect()
    }


def test_every_metric_is_documented() -> None:
    text = documentation()

    missing = [name for name in exposed_metrics() if not re.search(rf"\b{name}\b", text)]

    assert missing == []


def test_every_documented_metric_exists() -> None:
    exposed = exposed_metrics()
    # A histogram's series: its buckets, sum and count.
    names = set(exposed) | {
        name + suffix
        for name, kind in exposed.items()
        if kind == "histogram"
        for suffix in ("_bucket", "_sum", "_count")
    }

    unknown = sorted(set(re.findall(r"\blocalgate_[a-z_]*[a-z]", documentation())) - names)

    assert unknown == []
