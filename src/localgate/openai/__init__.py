"""The OpenAI wire vocabulary: routes of the OpenAI-compatible front door, chat completions
and embeddings translated to Gemini requests and their answers back, the stream's chunks,
and OpenAI's error shape. Used by the front door only: every stage sees Gemini requests."""
