"""What every configuration section shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    """A configuration section: unknown keys are errors, so typos do not pass silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)
