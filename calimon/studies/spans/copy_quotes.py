"""Copy-constrained quotes: a quote that can only be a contiguous run of the transcript's own
token ids, so it is grounded by construction and its character offsets come from the token
positions, never from matching text afterwards.

`CopyConstraint` is the state of one quote being generated: the set of transcript positions
where the quote so far ends (at the start, every position). The next token may be any token
that continues one of those runs (or an end token, once the quote is long enough); each token
chosen keeps the runs it continues. Repeated substrings keep several runs alive: the quote is
then found at each of them (`spans`), and `span` reports the first.

Tokens the encoder marked as not from the transcript (the truncation marker: offsets
``(-1, -1)``) are never allowed inside a quote, nor are ``blocked`` positions (the tokens of
quotes already given, so that the next quote is a different piece of the transcript).

This is the constraint and a greedy decoder over any next-token function;
`calimon.studies.spans.copy_generation` drives it with a backend under the ``quotes`` prompt format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from calimon.errors import InputError


@dataclass(frozen=True)
class CopiedQuote:
    """A finished quote: its token ids, the token range of its first occurrence in the
    transcript ``[start, end)``, its character offsets there, and how many occurrences the
    same ids have."""

    ids: tuple[int, ...]
    start: int
    end: int
    char_start: int
    char_end: int
    occurrences: int


class CopyConstraint:
    """The tokens a copy-constrained quote may take next, over the transcript's ``ids`` with
    their character ``offsets`` (one ``(start, end)`` per id; ``(-1, -1)`` for a token that is
    not transcript text). ``end_ids`` close the quote (allowed after ``min_tokens``); at
    ``max_tokens`` only they are allowed."""

    def __init__(self, ids: Sequence[int], offsets: Sequence[tuple[int, int]],
                 end_ids: Sequence[int], min_tokens: int = 1, max_tokens: int = 32,
                 blocked: Iterable[int] = ()):
        if len(ids) != len(offsets):
            raise InputError(f"expected one offset per id, got {len(offsets)} for {len(ids)}",
                             field="offsets")
        if min_tokens < 1 or max_tokens < min_tokens:
            raise InputError(f"expected 1 <= min_tokens <= max_tokens, got {min_tokens}, "
                             f"{max_tokens}", field="min_tokens")
        self.ids = [int(t) for t in ids]
        self.offsets = [tuple(o) for o in offsets]
        self.end_ids = frozenset(int(t) for t in end_ids)
        if self.end_ids & set(self.ids):
            raise InputError("an end id also occurs in the transcript: a quote could not "
                             "tell copying from closing", field="end_ids")
        self.min_tokens, self.max_tokens = min_tokens, max_tokens
        self.quoted: list[int] = []
        self.finished = False
        blocked = set(blocked)
        # which positions a quote may copy: transcript text that no earlier quote took
        self._open = [self.offsets[p][0] >= 0 and p not in blocked for p in range(len(self.ids))]
        # positions p where a run can continue: the quote so far equals ids[p - len:p]
        self._next = [p for p in range(len(self.ids)) if self._open[p]]

    def allowed(self) -> set[int]:
        """The ids the next token may be (empty once the quote is finished)."""
        if self.finished:
            return set()
        can_end = len(self.quoted) >= self.min_tokens
        if len(self.quoted) >= self.max_tokens:
            return set(self.end_ids)
        out = {self.ids[p] for p in self._next if p < len(self.ids) and self._open[p]}
        return out | set(self.end_ids) if can_end else out

    def advance(self, token: int) -> None:
        """Take ``token``; raises InputError for a token `allowed` does not list."""
        token = int(token)
        if token not in self.allowed():
            raise InputError(f"token {token} does not continue the quote", field="token")
        if token in self.end_ids:
            self.finished = True
            return
        self.quoted.append(token)
        # each run that this token continues now ends one position later
        self._next = [p + 1 for p in self._next
                      if p < len(self.ids) and self._open[p] and self.ids[p] == token]

    def spans(self) -> list[tuple[int, int]]:
        """Every token range ``[start, end)`` of the transcript the quote so far copies."""
        n = len(self.quoted)
        return [(p - n, p) for p in self._next]

    def quote(self) -> CopiedQuote:
        """The quote so far with its first occurrence's token and character offsets."""
        found = self.spans()
        if not self.quoted or not found:
            raise InputError("the quote is empty", field="quote")
        start, end = found[0]
        return CopiedQuote(tuple(self.quoted), start, end, self.offsets[start][0],
                           self.offsets[end - 1][1], len(found))


def copy_decode(choose: Callable[[list[int], list[int]], int],
                constraint: CopyConstraint) -> CopiedQuote:
    """A copy-constrained quote: ``choose(quote ids so far, allowed ids)`` picks the next token
    among the allowed ones (greedy: the model's most likely), until an end token, the end of
    the text or ``max_tokens``."""
    while not constraint.finished:
        allowed = sorted(constraint.allowed())
        if not allowed:
            if constraint.quoted:  # at the end of the text or of max_tokens, with no end id
                break
            raise InputError("nothing of the transcript can be quoted", field="transcript")
        constraint.advance(choose(list(constraint.quoted), allowed))
    return constraint.quote()


def copy_greedy(next_logprobs: Callable[[list[int]], np.ndarray],
                constraint: CopyConstraint) -> CopiedQuote:
    """A greedy copy-constrained quote: ``next_logprobs(quote ids so far)`` gives the model's
    (vocab,) log-probs of the next token; the most likely allowed token is taken."""
    def choose(quoted: list[int], allowed: list[int]) -> int:
        ids = np.asarray(allowed, dtype=np.int64)
        return int(ids[np.argmax(next_logprobs(quoted)[ids])])

    return copy_decode(choose, constraint)


__all__ = ["CopiedQuote", "CopyConstraint", "copy_decode", "copy_greedy"]
