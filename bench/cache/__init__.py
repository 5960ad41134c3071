"""Cache benchmark: lookup cost at 100,000 entries, the speed of a hit, paraphrase quality.

    python -m bench.cache --out docs/benchmarks-cache.md [--quick]

Targets (from the cache issue): a lookup adds at most 2 ms at p99 with 100,000 entries
for a tenant; an exact hit is answered at least 20x faster than the upstream's fixed
delay; on paraphrased repeated questions, the hit ratio and the rate of wrong hits are
reported for each embedder.

The lookup is timed in this process, on ``VectorCache.lookup`` over an embedded Chroma
store filled in bulk with entries shaped as the cache writes them (``lookup``). The
other two go over HTTP to real ``localgate serve`` processes (``gateway``; a fresh data
folder each), with the fake Gemini upstream running in this process: exact hits against
its delay (``speedup``), and paraphrases and near-misses (``quality``, judged by
``scoring``). ``report`` writes the Markdown; ``cli`` runs it all. Everything lives in
one temporary folder, and everything started is stopped, also on failure or Ctrl-C.
"""

from bench.cache.cli import main

__all__ = ["main"]
