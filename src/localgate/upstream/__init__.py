"""Upstreams: where redacted requests go, and the router that picks one."""

from localgate.upstream.base import StreamReply, UnaryReply, Upstream, UpstreamCall
from localgate.upstream.gemini import GeminiUpstream
from localgate.upstream.router import Router

__all__ = ["GeminiUpstream", "Router", "StreamReply", "UnaryReply", "Upstream", "UpstreamCall"]
