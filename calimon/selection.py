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
           categories: Sequence[str] | None = None) -> list[Sample]:
    """The samples a run reads: those of ``split`` (None: every split), labelled ones only
    unless ``labelled=False``, of ``categories`` when given; then at most ``limit`` of them as
    whole pairs (:func:`select_pairs`). The one split selection of every study."""
    chosen = [x for x in samples if (split is None or x.split == split)
              and (not labelled or x.label is not None)
              and (categories is None or x.category in categories)]
    return select_pairs(chosen, limit, seed)


def select_pairs(samples: Sequence[Sample], limit: int | None, seed: int = 0) -> list[Sample]:
    """At most `limit` samples made of whole pairs, taken round-robin over (category, task)
    cells in a seeded order; the result keeps the input order. None means all samples."""
    if limit is None or limit >= len(samples):
        return list(samples)
    pairs: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        pairs[s.pair_id].append(s)
    cells: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pid, members in pairs.items():
        cells[(members[0].category, members[0].task)].append(pid)
    for pids in cells.values():
        pids.sort(key=lambda p: hashlib.sha256(f"{seed}:{p}".encode()).hexdigest())
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
    return [s for s in samples if s.pair_id in chosen]


def dataset_hash(samples: Sequence[Sample]) -> str:
    """Identifies the exact set of samples (content and labels) a run read."""
    h = hashlib.sha256()
    for s in sorted(samples, key=lambda s: s.id):
        h.update(json.dumps([s.id, s.transcript_hash, s.label, s.category, s.task, s.pair_id])
                 .encode())
    return h.hexdigest()[:16]
