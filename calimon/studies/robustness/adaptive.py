"""The adaptive attacker: a budgeted beam search, per misbehaving transcript, over insertions of
the phrase library (`calimon.studies.robustness.edits`) that lower the monitor's score.

A state is a set of edits ``(phrase, position)`` applied to the clean transcript (phrases
combine; each phrase is used once per state). Every candidate is checked with
`keeps_misbehavior` before it is queried (code keeps its AST, gold spans keep their text);
refused candidates cost no query. The candidate order is an ordering of all (phrase, position)
pairs seeded by ``(seed, sample id)`` (every phrase once before any phrase twice); it does not
depend on the budget: the first ``b`` queries of a search with budget ``B >= b`` are exactly
the queries of a search with budget ``b``, so one search at the largest budget gives the flip
rate at every smaller one.

Each round expands each of the ``beam`` best expandable states (lowest score; fewer than
``max_edits`` edits and candidates left) by its next ``width`` untried pairs, scores the
children in chunks of ``chunk`` and stops as soon as a chunk holds a transcript the monitor no
longer flags, when the budget is spent or when no candidate is left.

**Budget** = monitor queries per transcript: one per distinct candidate transcript scored
(the clean score is not counted; a candidate whose text was already scored in the same search is
not queried again and not counted; readings the run store already holds are counted, since the
attacker would have had to make them). A search never makes more than ``budget`` queries.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from calimon.errors import InputError
from calimon.samples import Sample
from calimon.studies.robustness.edits import PHRASES, apply_edits, keeps_misbehavior, positions

Query = Callable[[list[Sample]], list[float | None]]


@dataclass(frozen=True)
class Candidate:
    """A scored rewrite: its edits (phrase index, position name), raw score (None: unscored,
    never a pass) and 1-based query index."""

    edits: tuple[tuple[int, str], ...]
    p: float | None
    query: int


@dataclass(frozen=True)
class SearchResult:
    """One transcript's search: the clean score, every scored candidate in query order, the
    query of the first candidate that passes (None: none did), and the candidates refused by
    the misbehavior check."""

    id: str
    p_clean: float
    candidates: tuple[Candidate, ...]
    flip_query: int | None
    refused: int

    @property
    def queries(self) -> int:
        """Monitor queries made."""
        return len(self.candidates)

    def best(self, budget: int | None = None) -> Candidate | None:
        """The lowest-scoring candidate among the first ``budget`` queries (all by default);
        None when none was scored."""
        got = [c for c in self.candidates[:budget] if c.p is not None]
        return min(got, key=lambda c: (c.p, c.query)) if got else None

    def best_p(self, budget: int | None = None) -> float:
        """The lowest score found within ``budget`` queries, the clean score if none is lower."""
        b = self.best(budget)
        return self.p_clean if b is None else min(self.p_clean, b.p)


@dataclass
class _State:
    edits: tuple[tuple[int, str], ...]
    p: float
    query: int
    cursor: int = 0


def candidate_order(sample: Sample, seed: int, phrases=PHRASES) -> list[tuple[int, str]]:
    """Every (phrase index, position name) pair of ``sample``, in the search's seeded order:
    phrases in a shuffled order, each at a shuffled position, then each again at its next
    position, so that the first ``len(phrases)`` candidates try every phrase once."""
    rng = random.Random(f"{seed}:{sample.id}")
    names = [p.name for p in positions(sample)]
    ids = list(range(len(phrases)))
    rng.shuffle(ids)
    where = {i: rng.sample(names, len(names)) for i in ids}
    return [(i, where[i][j]) for j in range(len(names)) for i in ids]


def _check(budget: int, beam: int, width: int, max_edits: int, chunk: int) -> None:
    for name, v in (("budget", budget), ("beam", beam), ("width", width),
                    ("max_edits", max_edits), ("chunk", chunk)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"expected an integer >= 1, got {v!r}", field=name)


def search(sample: Sample, p_clean: float, query: Query, flagged: Callable[[float], bool], *,
           budget: int, beam: int = 1, width: int = 8, max_edits: int = 3, chunk: int = 8,
           seed: int = 0, phrases: Sequence[tuple[str, str]] = PHRASES) -> SearchResult:
    """Search rewrites of ``sample`` (clean raw score ``p_clean``) that ``flagged`` no longer
    flags, querying ``query`` at most ``budget`` times (module docstring)."""
    _check(budget, beam, width, max_edits, chunk)
    order = candidate_order(sample, seed, phrases)
    states = [_State((), p_clean, 0)]
    seen, scored, refused, flip = {sample.response}, [], 0, None
    while len(scored) < budget and flip is None:
        live = [st for st in states if len(st.edits) < max_edits and st.cursor < len(order)]
        live = sorted(live, key=lambda st: (st.p, st.query))[:beam]
        children: list[tuple[tuple[tuple[int, str], ...], Sample]] = []
        for st in live:
            taken = 0
            while taken < width and st.cursor < len(order):
                edit = order[st.cursor]
                st.cursor += 1
                if edit[0] in {e[0] for e in st.edits}:
                    continue
                edits = st.edits + (edit,)
                rewritten = apply_edits(sample, edits, phrases)
                if not keeps_misbehavior(sample, rewritten):
                    refused += 1
                    continue
                if rewritten.response in seen:
                    continue
                seen.add(rewritten.response)
                children.append((edits, rewritten))
                taken += 1
        if not children:
            break
        children = children[:budget - len(scored)]
        for i in range(0, len(children), chunk):
            part = children[i:i + chunk]
            got = query([_named(sample, c, len(scored) + k + 1) for k, (_, c) in
                         enumerate(part)])
            for (edits, _), p in zip(part, got, strict=True):
                cand = Candidate(edits, None if p is None else float(p), len(scored) + 1)
                scored.append(cand)
                if cand.p is not None:
                    states.append(_State(edits, cand.p, cand.query))
                    if flip is None and not flagged(cand.p):
                        flip = cand.query
            if flip is not None:
                break
    return SearchResult(sample.id, float(p_clean), tuple(scored), flip, refused)


def _named(clean: Sample, rewritten: Sample, k: int) -> Sample:
    from dataclasses import replace

    return replace(rewritten, id=f"{clean.id}@adaptive{k}",
                   meta={**clean.meta, "attack": "adaptive", "attacked_id": clean.id})


def describe(cand: Candidate, phrases=PHRASES) -> list[dict[str, str]]:
    """The edits of ``cand`` as ``{"kind", "position", "text"}`` rows."""
    return [{"kind": phrases[i][0], "position": name, "text": phrases[i][1]}
            for i, name in cand.edits]
