"""The OpenAI-compatible front door."""

from __future__ import annotations

from localgate.config.base import Section

__all__ = ["OpenAISettings"]


class OpenAISettings(Section):
    """How the OpenAI-compatible routes treat what they cannot honour."""

    # A chat completions or embeddings parameter localgate cannot honour (logit_bias,
    # parallel_tool_calls: false, a message's name, ...) is refused with a 400 naming
    # it; true drops such parameters instead. Read at start.
    drop_unsupported: bool = False
