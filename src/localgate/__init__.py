"""localgate: a self-hosted Gemini gateway that keeps personal data inside the company."""

__version__ = "0.1.0"

__all__ = ["__version__"]
