"""How an admin service's refusal reaches the operator: one line, exit code 1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from localgate.errors import LocalgateError

__all__ = ["reported"]


@contextmanager
def reported() -> Iterator[None]:
    """Turn a ``LocalgateError`` into click's ``Error: <message>`` and exit code 1."""
    try:
        yield
    except LocalgateError as exc:
        raise click.ClickException(exc.message) from exc
