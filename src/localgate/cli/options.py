"""The ``--config`` option every ``localgate`` command takes, and loading it for the CLI.

Every command that reads the configuration takes ``--config FILE`` after its own name
(``localgate audit verify --config F``). Command groups also take it before the
subcommand (``localgate audit --config F verify``), the spelling earlier versions required
for ``audit``, ``rag`` and ``cache``; both mean the same, and naming two different files
is an error. Without either, ``$LOCALGATE_CONFIG``, else the built-in defaults.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from localgate.config import Settings

__all__ = ["config_option", "group_config_option", "load_or_exit"]

F = TypeVar("F", bound=Callable[..., Any])

_CONFIG_HELP = "YAML configuration file (default: $LOCALGATE_CONFIG, else built-in defaults)."
# Where a group's --config waits for its subcommand (a context's meta is shared by its children).
_GROUP_CONFIG = "localgate.group_config"


def config_option(func: F) -> F:
    """Add ``--config FILE`` (default: $LOCALGATE_CONFIG, else the built-in defaults)."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help=_CONFIG_HELP,
    )(func)


def group_config_option(func: F) -> F:
    """Add a group's ``--config FILE``, handed to whichever subcommand runs."""
    return click.option(
        "--config",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        expose_value=False,
        callback=_remember_group_config,
        help="The same as --config after the subcommand's name (still accepted here).",
    )(func)


def _remember_group_config(
    ctx: click.Context, param: click.Parameter, value: Path | None
) -> Path | None:
    if value is not None:
        ctx.meta[_GROUP_CONFIG] = value
    return value


def load_or_exit(
    config_path: Path | None, *, upstream_keys: bool = True
) -> tuple[Settings, Path | None]:
    """The settings, or every problem printed with its field path and exit code 1.

    ``config_path`` is the command's own ``--config``; a group's, given before the
    subcommand, is used when the command has none. ``upstream_keys`` False: the upstream
    key files are not read (``load_settings``).
    """
    # Imported here: building the settings models is most of a command's start-up, which
    # `localgate --help` need not pay.
    from localgate.config import load_settings
    from localgate.errors import ConfigError

    try:
        return load_settings(_chosen(config_path), upstream_keys=upstream_keys)
    except ConfigError as exc:
        click.echo(f"localgate: invalid configuration in {exc.source}:", err=True)
        for problem in exc.problems:
            click.echo(f"  {problem}", err=True)
        sys.exit(1)


def _chosen(config_path: Path | None) -> Path | None:
    ctx = click.get_current_context(silent=True)
    before: Path | None = ctx.meta.get(_GROUP_CONFIG) if ctx is not None else None
    if config_path is not None and before is not None and config_path != before:
        raise click.UsageError(
            f"two configuration files: --config {before} before the subcommand and "
            f"--config {config_path} after it; give one"
        )
    return config_path or before
