"""Configured patterns (custom redaction rules), compiled with RE2.

RE2 runs in time linear in the input whatever the pattern, so a tenant's rule can
never hang the gateway (no backreferences or look-arounds: RE2 refuses them, and the
configuration check reports the rule that uses one). The configuration validates
patterns with the same function the redaction stage compiles them with.
"""

from __future__ import annotations

from typing import Any

import re2

__all__ = ["compile_pattern"]


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False
    return options


def compile_pattern(pattern: str) -> Any:
    """Compile with RE2; raise ``ValueError`` saying why the pattern is not accepted."""
    try:
        return re2.compile(pattern, options=_options())
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"not a valid RE2 pattern: {reason}") from exc
