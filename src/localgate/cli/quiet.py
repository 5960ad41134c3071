"""Start-up failures inside the server, in one line unless ``--debug``.

A failure while the gateway builds itself (inside the ASGI lifespan: a store that cannot
be opened, a file that is not what it should be) reaches uvicorn's logger as a whole
traceback: Starlette hands it over as the text of ``lifespan.startup.failed``, or uvicorn
logs the exception itself. Without ``--debug`` the operator gets the exception's own last
line, which names what is wrong, as the checks before the start do.
"""

from __future__ import annotations

import logging
import traceback

__all__ = ["OneLineStartupErrors"]

_TRACEBACK = "Traceback (most recent call last):"


class OneLineStartupErrors(logging.Filter):
    """Turns a traceback logged by the server into its last line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            last = traceback.format_exception_only(record.exc_info[1])[-1].strip()
        elif message.startswith(_TRACEBACK):
            last = message.strip().splitlines()[-1].strip()
        else:
            return True
        record.msg = "cannot start: %s (localgate serve --debug shows the traceback)"
        record.args = (last,)
        record.exc_info = None
        record.exc_text = None
        return True
