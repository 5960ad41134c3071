"""Upstreams: where redacted requests go, the router that names the candidates and the
dispatcher that tries them."""

from localgate.upstream.base import StreamReply, UnaryReply, Upstream, UpstreamCall
from localgate.upstream.dispatcher import UpstreamDispatcher
from localgate.upstream.gemini import GeminiUpstream
from localgate.upstream.router import Router

__all__ = [
    "GeminiUpstream",
    "Router",
    "StreamReply",
    "UnaryReply",
    "Upstream",
    "UpstreamCall",
    "UpstreamDispatcher",
]
