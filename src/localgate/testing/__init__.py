"""Test helpers that ship with localgate: a fake Gemini API and a fake OpenAI-compatible
server to point the gateway at."""

from localgate.testing.fake_gemini import FakeGemini, RecordedRequest
from localgate.testing.fake_openai import FakeOpenAI, ScriptedAnswer

__all__ = ["FakeGemini", "FakeOpenAI", "RecordedRequest", "ScriptedAnswer"]
