"""The ``--config`` option every ``localgate`` command takes, and loading it for the CLI."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from localgate.config import Settings

__all__ = ["config_option", "load_or_exit"]

F = TypeVar("F", bound=Callable[..., Any])


def config_option(func: F) -> F:
    """Add ``--config FILE`` (default: $LOCALGATE_CONFIG, else the built-in defaults)."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="YAML configuration file (default: $LOCALGATE_CONFIG, else built-in defaults).",
    )(func)


def load_or_exit(config_path: Path | None) -> tuple[Settings, Path | None]:
    """The settings, or every problem printed with its field path and exit code 1."""
    # Imported here: building the settings models is most of a command's start-up, which
    # `localgate --help` need not pay.
    from localgate.config import load_settings
    from localgate.errors import ConfigError

    try:
        return load_settings(config_path)
    except ConfigError as exc:
        click.echo(f"localgate: invalid configuration in {exc.source}:", err=True)
        for problem in exc.problems:
            click.echo(f"  {problem}", err=True)
        sys.exit(1)
