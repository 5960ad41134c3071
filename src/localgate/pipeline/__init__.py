"""The request pipeline.

identity → limits → route plan → redaction → retrieval → cache → audit → dispatch → response,
and the completion that ends every request once.
"""

from localgate.exchange.context import Inbound, RequestContext
from localgate.exchange.outcome import Outcome
from localgate.pipeline.completion import Completion, internal_error
from localgate.pipeline.pipeline import Pipeline, Reply

__all__ = [
    "Completion",
    "Inbound",
    "Outcome",
    "Pipeline",
    "Reply",
    "RequestContext",
    "internal_error",
]
