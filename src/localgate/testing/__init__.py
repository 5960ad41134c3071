"""Test helpers that ship with localgate: a fake Gemini API to point the gateway at."""

from localgate.testing.fake_gemini import FakeGemini, RecordedRequest

__all__ = ["FakeGemini", "RecordedRequest"]
