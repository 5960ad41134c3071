"""The Gemini REST wire vocabulary: routes, request schemas, stream framing and merging,
and reading a request's texts. Used by the front door, the stages and the upstreams."""
