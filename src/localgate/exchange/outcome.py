"""How a request ended: one value per ending, written once by the pipeline's completion.

The values are the strings the audit trail records in a completion record's
``outcome`` field; they are part of the record format, so they never change.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Outcome"]


class Outcome(Enum):
    """How one request ended; ``value`` is what the audit record says."""

    # Answered: by the upstream (or the in-house embedder), or from the local cache.
    FORWARDED = "forwarded"
    SERVED_FROM_CACHE = "served from cache"
    # Refused by a stage: the redaction policy (4xx), a failing redactor (5xx), retrieval.
    BLOCKED_BY_POLICY = "blocked by policy"
    REDACTION_FAILED = "refused: redaction failed"
    RETRIEVAL_FAILED = "refused: retrieval"
    # The upstream refused or failed, before or during its answer.
    UPSTREAM_ERROR = "upstream error"
    # The client went away (or the gateway, shutting down, gave up on the request).
    CLIENT_DISCONNECTED = "client disconnected"
    # A defect inside the gateway ended it (the client gets a 500 naming the request id).
    INTERNAL_ERROR = "internal error"
    # Refused before the audit trail holds anything of it to complete: the route, the
    # credential, the body, the limits, or the trail itself declining its request record.
    # Logged and counted, never an audit completion record.
    REFUSED = "refused"
    # The answer was ready but withheld (503) because its completion record could not be
    # written durably; the audit stage writes this one itself, with the answer's outcome.
    WITHHELD = "withheld: audit trail unavailable"
