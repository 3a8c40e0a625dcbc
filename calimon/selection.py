"""Choosing which samples a run reads: whole pairs only, deterministic, balanced over cells."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence

from calimon.samples import Sample

ALL = "all"  # the command line's spelling of "every split" (None in the library)


def split_arg(value: str | None) -> str | None:
    """A split named on the command line: ``all`` (or the older ``none``) means every split,
    None in the library; any other name is kept."""
    return None if value is None or value.lower() in (ALL, "none") else value


def select(samples: Sequence[Sample], split: str | None = None, *, limit: int | None = None,
           seed: int = 0, labelled: bool = True,
           categories: Sequence[str] | None = None, min_per_class: int = 0) -> list[Sample]:
    """The samples a run reads: those of ``split`` (None: every split), labelled ones only
    unless ``labelled=False``, of ``categories`` when given; then at most ``limit`` of them as
    whole pairs (:func:`select_pairs`, with ``min_per_class``). The one split selection of
    every study."""
    chosen = [x for x in samples if (split is None or x.split == split)
              and (not labelled or x.label is not None)
              and (categories is None or x.category in categories)]
    return select_pairs(chosen, limit, seed, min_per_class=min_per_class)


def select_pairs(samples: Sequence[Sample], limit: int | None, seed: int = 0, *,
                 min_per_class: int = 0) -> list[Sample]:
    """At most `limit` samples made of whole pairs, taken round-robin over (category, task)
    cells in a seeded order; the result keeps the input order. None means all samples.

    ``min_per_class``: when that pick holds fewer labelled samples of a class than this (an
    unpaired sample counts for one class only, so 40 can hold 18 and 21), complete pairs (one
    sample of each label) are picked first, the same way, and the others fill what remains of
    the limit, when that reaches ``min_per_class`` (else the first pick is kept)."""
    if limit is None or limit >= len(samples):
        return list(samples)
    pairs: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        pairs[s.pair_id].append(s)
    chosen = _round_robin(pairs, list(pairs), limit, seed)
    if min_per_class and _rarer(pairs, chosen) < min_per_class:
        whole = [p for p, m in pairs.items() if {x.label for x in m} == {True, False}]
        first = _round_robin(pairs, whole, limit, seed)
        rest = [p for p in pairs if p not in first]
        taken = sum(len(pairs[p]) for p in first)
        balanced = first | _round_robin(pairs, rest, limit - taken, seed)
        if _rarer(pairs, balanced) >= min_per_class:
            chosen = balanced
    return [s for s in samples if s.pair_id in chosen]


def _rarer(pairs: dict[str, list[Sample]], chosen: set[str]) -> int:
    """The count of the rarer label among the chosen pairs' labelled samples."""
    labels = [x.label for p in chosen for x in pairs[p] if x.label is not None]
    return min(sum(labels), len(labels) - sum(labels))


def _round_robin(pairs: dict[str, list[Sample]], pids: Sequence[str], limit: int,
                 seed: int) -> set[str]:
    """Pair ids of ``pids`` holding at most ``limit`` samples, taken round-robin over
    (category, task) cells in a seeded order (a cell whose next pair does not fit is done)."""
    cells: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pid in pids:
        members = pairs[pid]
        cells[(members[0].category, members[0].task)].append(pid)
    for queue in cells.values():
        queue.sort(key=lambda p: hashlib.sha256(f"{seed}:{p}".encode()).hexdigest())
    chosen: set[str] = set()
    taken = 0
    queues = [cells[c] for c in sorted(cells)]
    while taken < limit and any(queues):
        for q in queues:
            if q and taken + len(pairs[q[0]]) <= limit:
                pid = q.pop(0)
                chosen.add(pid)
                taken += len(pairs[pid])
            elif q:
                q.clear()
    return chosen


def dataset_hash(samples: Sequence[Sample]) -> str:
    """Identifies the exact set of samples (content and labels) a run read."""
    h = hashlib.sha256()
    for s in sorted(samples, key=lambda s: s.id):
        h.update(json.dumps([s.id, s.transcript_hash, s.label, s.category, s.task, s.pair_id])
                 .encode())
    return h.hexdigest()[:16]
