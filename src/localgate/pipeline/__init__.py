"""The request pipeline.

identity → limits → redaction → cache → audit → route → upstream → response.
"""

from localgate.exchange.context import Inbound, RequestContext
from localgate.pipeline.pipeline import Pipeline, Reply

__all__ = ["Inbound", "Pipeline", "Reply", "RequestContext"]
