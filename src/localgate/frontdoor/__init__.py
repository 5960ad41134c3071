"""The front door: Gemini REST routes, body limits, one parse, Gemini error envelopes."""
