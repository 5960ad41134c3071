"""Each migration of the shared state schema, in order."""
