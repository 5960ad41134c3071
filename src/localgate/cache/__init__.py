"""The cache stage: repeated (redacted) requests answered locally."""
