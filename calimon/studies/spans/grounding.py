"""Ground quoted evidence to [start, end) character offsets in a transcript.

A quote goes down a ladder and stops at the first rung that matches:

1. ``verbatim``: the quote (outer whitespace trimmed) occurs character for character;
2. ``normalized``: it occurs after :func:`normalize` (NFKC, casefold, curly quotes and dashes
   unified, zero-width characters dropped, whitespace runs collapsed); if not, again with the
   quote's leading and trailing punctuation stripped. Offsets are mapped back to the ORIGINAL
   text through a per-character index map and always start and end on whole characters of it;
3. a quote with an internal ellipsis ("foo ... bar", "foo [...] bar") that failed 1-2 is
   replaced by its longest part, which goes down the whole ladder;
4. ``fuzzy``: ``rapidfuzz.fuzz.partial_ratio_alignment`` on the normalized strings scores at
   least ``fuzzy_threshold`` (quotes shorter than ``min_fuzzy_chars`` skip this rung);
5. ``ungrounded``: start = end = None; the quote is kept, with a reason.

Repeated strings (rungs 1-2): the first occurrence that does not overlap a span in ``taken``
(the spans of earlier quotes of the same list); if every occurrence overlaps, the first one.
Fuzzy matches take rapidfuzz's best alignment (the earliest among equals).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any

from rapidfuzz import fuzz

from calimon.errors import InputError

STATUSES = ("verbatim", "normalized", "fuzzy", "ungrounded", "copied")  # copied: by construction
FUZZY_THRESHOLD = 90.0
MIN_FUZZY_CHARS = 8

_TRANSLATE = str.maketrans({
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u2035\u2039\u203a", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u2036\u00ab\u00bb", '"'),
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2043\ufe58\ufe63\uff0d", "-"),
    **dict.fromkeys("\u200b\u200c\u200d\u2060\ufeff\u00ad", ""),
})
# An elision inside a quote: "...", "…", "[...]", "(…)" with the spaces around it.
_ELLIPSIS = re.compile(r"\s*(?:\[\s*(?:\.{3,}|\u2026)\s*\]|\(\s*(?:\.{3,}|\u2026)\s*\)|\.{3,}|\u2026)\s*")


@dataclass(frozen=True)
class GroundedSpan:
    """One quote and where it sits in the text; ``score`` is filled later (occlusion)."""

    quote: str
    start: int | None
    end: int | None
    status: str
    similarity: float
    score: float | None = None
    reason: str = ""

    @property
    def grounded(self) -> bool:
        """True unless the quote was not found in the text."""
        return self.status != "ungrounded"

    def with_score(self, score: float | None) -> GroundedSpan:
        """The same span with ``score`` set."""
        return replace(self, score=score)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GroundedSpan:
        """A span from its `to_dict` form (unknown keys ignored); raises InputError for a non-
        object or an unknown status."""
        if not isinstance(d, dict):
            raise InputError(f"expected a JSON object, got {type(d).__name__}", field="span")
        if d.get("status") not in STATUSES:
            raise InputError(f"expected one of {list(STATUSES)}, got {d.get('status')!r}",
                             field="status")
        known = {"quote", "start", "end", "status", "similarity", "score", "reason"}
        return cls(**{k: v for k, v in d.items() if k in known})


def _units(text: str) -> Iterator[tuple[int, int]]:
    """[start, end) of each base character with the combining marks that follow it."""
    i, n = 0, len(text)
    while i < n:
        j = i + 1
        while j < n and unicodedata.combining(text[j]):
            j += 1
        yield i, j
        i = j


def _fold(unit: str) -> str:
    if unit.isascii():
        return unit.lower()
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", unit).casefold())
    return folded.translate(_TRANSLATE)


@lru_cache(maxsize=16)
def normalize_with_map(text: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """The normalized text and, per normalized character, the [start, end) it came from."""
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    for start, end in _units(text):
        for ch in _fold(text[start:end]):
            if ch.isspace():
                ch = " "
            if ch in " -" and out and out[-1] == ch:
                spans[-1] = (spans[-1][0], end)
                continue
            out.append(ch)
            spans.append((start, end))
    return "".join(out), tuple(spans)


def normalize(text: str, *, strip_punct: bool = False) -> str:
    """Normalized form used for matching; outer whitespace (and optionally punctuation) removed."""
    norm = normalize_with_map(text)[0].strip(" ")
    return _strip_punct(norm) if strip_punct else norm


def _strip_punct(s: str) -> str:
    i, j = 0, len(s)
    while i < j and (s[i] == " " or s[i] == "`" or unicodedata.category(s[i])[0] == "P"):
        i += 1
    while j > i and (s[j - 1] == " " or s[j - 1] == "`"
                     or unicodedata.category(s[j - 1])[0] == "P"):
        j -= 1
    return s[i:j]


def _overlaps(start: int, end: int, taken: Iterable[tuple[int, int]]) -> bool:
    return any(start < t_end and t_start < end for t_start, t_end in taken)


def _pick(candidates: Iterable[tuple[int, int]],
          taken: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    first = None
    for cand in candidates:
        if first is None:
            first = cand
        if not _overlaps(*cand, taken):
            return cand
    return first


def _exact(needle: str, text: str) -> Iterator[tuple[int, int]]:
    i = text.find(needle)
    while i >= 0:
        yield i, i + len(needle)
        i = text.find(needle, i + 1)


def _normalized(needle: str, norm: str,
                spans: tuple[tuple[int, int], ...]) -> Iterator[tuple[int, int]]:
    """Original offsets of each occurrence of ``needle`` in ``norm`` on whole-unit boundaries."""
    n = len(norm)
    for i, j in _exact(needle, norm):
        starts_unit = i == 0 or spans[i - 1][0] != spans[i][0]
        ends_unit = j == n or spans[j][0] != spans[j - 1][0]
        if starts_unit and ends_unit:
            yield spans[i][0], spans[j - 1][1]


def _ungrounded(quote: str, reason: str, similarity: float = 0.0) -> GroundedSpan:
    return GroundedSpan(quote, None, None, "ungrounded", similarity, None, reason)


def _ground(quote: str, text: str, threshold: float, taken: Sequence[tuple[int, int]],
            min_fuzzy_chars: int, split_ellipsis: bool) -> GroundedSpan:
    stripped = quote.strip()
    if not stripped:
        return _ungrounded(quote, "empty quote")
    hit = _pick(_exact(stripped, text), taken)
    if hit:
        return GroundedSpan(quote, hit[0], hit[1], "verbatim", 100.0)
    norm, spans = normalize_with_map(text)
    needles = [normalize(quote)]
    needles.append(_strip_punct(needles[0]))
    for needle in dict.fromkeys(needles):
        if needle:
            hit = _pick(_normalized(needle, norm, spans), taken)
            if hit:
                return GroundedSpan(quote, hit[0], hit[1], "normalized", 100.0)
    needle = needles[-1]
    if not needle:
        return _ungrounded(quote, "no content left after normalization")
    if split_ellipsis:
        parts = [p for p in _ELLIPSIS.split(stripped) if normalize(p, strip_punct=True)]
        if len(parts) > 1:
            longest = max(parts, key=lambda p: len(normalize(p, strip_punct=True)))
            part = _ground(longest, text, threshold, taken, min_fuzzy_chars, False)
            if part.grounded:
                return replace(part, quote=quote,
                               reason="longest part of an elided quote: " + repr(longest))
            return replace(part, quote=quote,
                           reason="longest part of an elided quote not found: " + part.reason)
    if len(needle) < min_fuzzy_chars:
        return _ungrounded(quote, f"not found; shorter than {min_fuzzy_chars} characters, "
                                  "too short for a fuzzy match")
    best = fuzz.partial_ratio_alignment(needle, norm)
    if best is None or best.score < threshold:
        score = 0.0 if best is None else float(best.score)
        return _ungrounded(quote, f"not found; best fuzzy similarity {score:.1f} < "
                                  f"{threshold:g}", score)
    i, j = _refine(needle, norm, best.dest_start, best.dest_end)
    if i >= j:
        return _ungrounded(quote, "fuzzy match covers only whitespace", float(best.score))
    return GroundedSpan(quote, spans[i][0], spans[j - 1][1], "fuzzy", float(best.score))


def _edge(s: str, i: int) -> bool:
    """Whether position ``i`` of ``s`` is a word edge (between a word character and another)."""
    return i <= 0 or i >= len(s) or s[i - 1].isalnum() != s[i].isalnum() or " " in s[i - 1:i + 1]


def _refine(needle: str, norm: str, i: int, j: int) -> tuple[int, int]:
    """Move the fuzzy window's ends to the nearby word edges that best match the needle.

    partial_ratio slides a window as long as the needle, so its ends can cut words or carry a
    stray quote mark; this picks, among word edges within a few characters, the pair with the
    highest ``fuzz.ratio`` (ties: the pair closest to the original window).
    """
    w = max(2, min(20, len(needle) // 5))
    starts = [k for k in range(max(0, i - w), min(len(norm), i + w) + 1)
              if _edge(norm, k) and k < len(norm) and norm[k] != " "] or [i]
    ends = [k for k in range(max(0, j - w), min(len(norm), j + w) + 1)
            if _edge(norm, k) and k > 0 and norm[k - 1] != " "] or [j]
    best, best_key = (i, j), None
    for a in starts:
        for b in ends:
            if b <= a:
                continue
            key = (fuzz.ratio(needle, norm[a:b]), -abs(a - i) - abs(b - j))
            if best_key is None or key > best_key:
                best, best_key = (a, b), key
    a, b = best
    while a < b and norm[a] == " ":
        a += 1
    while b > a and norm[b - 1] == " ":
        b -= 1
    return a, b


def _check(quote: Any, text: Any, threshold: Any, min_fuzzy_chars: Any) -> None:
    if not isinstance(quote, str):
        raise InputError(f"expected a string, got {type(quote).__name__}", field="quote")
    if not isinstance(text, str):
        raise InputError(f"expected a string, got {type(text).__name__}", field="text")
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) \
            or not 0 < threshold <= 100:
        raise InputError(f"expected a number in (0, 100], got {threshold!r}",
                         field="fuzzy_threshold")
    if isinstance(min_fuzzy_chars, bool) or not isinstance(min_fuzzy_chars, int) \
            or min_fuzzy_chars < 1:
        raise InputError(f"expected a positive integer, got {min_fuzzy_chars!r}",
                         field="min_fuzzy_chars")


def ground_quote(quote: str, text: str, *, fuzzy_threshold: float = FUZZY_THRESHOLD,
                 taken: Iterable[tuple[int, int]] = (),
                 min_fuzzy_chars: int = MIN_FUZZY_CHARS) -> GroundedSpan:
    """Ground one quote in ``text``; see the module docstring for the ladder and the rules."""
    _check(quote, text, fuzzy_threshold, min_fuzzy_chars)
    return _ground(quote, text, float(fuzzy_threshold), tuple(taken), min_fuzzy_chars, True)


def ground_quotes(quotes: Iterable[str], text: str, *, fuzzy_threshold: float = FUZZY_THRESHOLD,
                  taken: Iterable[tuple[int, int]] = (),
                  min_fuzzy_chars: int = MIN_FUZZY_CHARS) -> list[GroundedSpan]:
    """Ground quotes in order; each grounded span is ``taken`` for the quotes after it."""
    if isinstance(quotes, str):
        raise InputError("expected a list of strings, got a single string", field="quotes")
    held = list(taken)
    out = []
    for quote in quotes:
        span = ground_quote(quote, text, fuzzy_threshold=fuzzy_threshold, taken=held,
                            min_fuzzy_chars=min_fuzzy_chars)
        if span.grounded:
            held.append((span.start, span.end))
        out.append(span)
    return out
