"""The detector: every recognizer over one text, overlaps resolved, offsets in the original."""

from __future__ import annotations

import bisect
import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from localgate.redaction.findings import Finding
from localgate.redaction.fold import fold
from localgate.redaction.names import NameRecognizer
from localgate.redaction.recognizers import Prefilters, Scan, builtin_recognizers
from localgate.redaction.reveal import reveal

__all__ = ["MEMO_ENTRIES", "Detector", "Recognizer"]

# Texts whose findings a detector remembers (``Detector.remembering``), all tenants together.
# An entry takes a few hundred bytes for a text with a finding or two, about 2 KB for one as
# dense as the benchmark's PII-dense prompt (21 findings; tracemalloc): 35 MB at the most.
MEMO_ENTRIES = 16384


class Recognizer(Protocol):
    """Anything that finds typed spans in a prepared text."""

    def find(self, scan: Scan) -> Iterable[Finding]:
        """Findings with offsets into ``scan.folded`` (which are offsets into the original)."""
        ...


class Detector:
    """Runs recognizers and keeps the best of overlapping findings."""

    def __init__(self, recognizers: Sequence[Recognizer], min_score: float = 0.5) -> None:
        self.recognizers = tuple(recognizers)
        self.min_score = min_score
        # One RE2 pass over the text says which prefiltered recognizers can match at all:
        # a recognizer runs only if its prefilter matches, and, if it keeps a match only
        # next to a context word, one of those words is in the text. The others (names,
        # custom rules) always run; the same pass tells those with gates of their own
        # (the name rules) which of them match (``Scan.matching``).
        self._always: list[Recognizer] = []
        gated: list[tuple[Recognizer, tuple[str, ...]]] = []
        own_gates: list[str] = []
        for recognizer in self.recognizers:
            pattern = getattr(recognizer, "prefilter", None)
            if pattern is None:
                self._always.append(recognizer)
                own_gates += getattr(recognizer, "gates", ())
                continue
            gates = (pattern, getattr(recognizer, "context_gate", None))
            gated.append((recognizer, tuple(gate for gate in gates if gate)))
        self._prefilters = Prefilters([*(gate for _, gates in gated for gate in gates), *own_gates])
        index = self._prefilters.index
        self._gated = [
            (recognizer, frozenset(index[gate] for gate in gates)) for recognizer, gates in gated
        ]
        self._memo = _Memo(MEMO_ENTRIES)

    @classmethod
    def builtin(
        cls, *, names: bool = True, extra: Sequence[Recognizer] = (), min_score: float = 0.5
    ) -> Detector:
        """The built-in recognizers, optionally without PERSON/CN_ADDRESS, plus ``extra``."""
        recognizers: list[Recognizer] = [*extra, *builtin_recognizers()]
        if names:
            recognizers.append(NameRecognizer())
        return cls(recognizers, min_score)

    def detect(self, text: str) -> list[Finding]:
        """Non-overlapping findings in ``text``, in order of position.

        Detection reads the text as the model will (``reveal``: escapes, percent-encoding
        and invisible characters undone); each finding spans the whole encoded stretch of
        ``text`` that its value came from.
        """
        if not text:
            return []
        revealed = reveal(text)
        if revealed is None:
            return self._detect(text)
        span = revealed.original_span
        return [
            Finding(*span(found.start, found.end), found.type, found.score)
            for found in self._detect(revealed.text)
        ]

    def remembering(
        self, scope: str, counted: Callable[[bool], None] | None = None
    ) -> Callable[[str], list[Finding]]:
        """``detect``, remembering the findings of the texts seen lately in ``scope`` (a
        tenant and end user).

        A conversation sends its whole history with every new turn: each earlier turn is
        then looked up (a digest of the text) instead of scanned again. Detection depends on
        the text alone, so a remembered answer is the one a scan would give. Scopes never
        share an entry: how fast a text is answered says nothing about what another tenant
        sent. The texts themselves are not kept, only their digests and findings.
        ``counted`` hears, for each text, whether it was remembered.
        """
        return functools.partial(self._remembered, scope, counted)

    def _remembered(
        self, scope: str, counted: Callable[[bool], None] | None, text: str
    ) -> list[Finding]:
        if not text:
            return []
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16)
        key = (scope, digest.digest())
        found = self._memo.get(key)
        if counted is not None:
            counted(found is not None)
        if found is None:
            found = tuple(self.detect(text))
            self._memo.put(key, found)
        return list(found)

    def _detect(self, text: str) -> list[Finding]:
        if not text:
            return []
        folded = fold(text)
        hits = frozenset(self._prefilters.hits(folded))
        scan = Scan(folded, self._prefilters, hits)
        active = [*self._always, *(r for r, needs in self._gated if needs <= hits)]
        found = [
            finding
            for recognizer in active
            for finding in recognizer.find(scan)
            if finding.score >= self.min_score
        ]
        return _resolve(found)


def _resolve(findings: list[Finding]) -> list[Finding]:
    """Greedy choice: higher confidence first, then the longer span, then the earlier one."""
    if len(findings) < 2:
        return findings
    findings.sort(key=lambda f: (-f.score, f.start - f.end, f.start))
    # Kept spans never overlap, so sorted by start they are sorted by end too: a new span
    # can only collide with its two neighbours in that order.
    starts: list[int] = []
    kept: list[Finding] = []
    for finding in findings:
        at = bisect.bisect_left(starts, finding.start)
        if at > 0 and kept[at - 1].end > finding.start:
            continue
        if at < len(kept) and kept[at].start < finding.end:
            continue
        starts.insert(at, finding.start)
        kept.insert(at, finding)
    return kept


class _Memo:
    """A bounded map that forgets what was used longest ago. The gateway detects on its
    event loop's thread; the lock keeps the map whole should another thread detect too."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, bytes], tuple[Finding, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, bytes]) -> tuple[Finding, ...] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: tuple[str, bytes], found: tuple[Finding, ...]) -> None:
        with self._lock:
            self._entries[key] = found
            if len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
