"""The gateway benchmark: localgate against the fake upstream directly and a floor proxy.

``python -m bench.run --out docs/benchmarks.md`` (``make bench``) starts every server
itself, drives them with wrk and writes the report; see ``docs/benchmarks.md``.
"""
