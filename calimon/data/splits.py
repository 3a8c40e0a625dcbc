"""Pair-level, cell-stratified split assignment. No pair ever straddles two splits."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from calimon.samples import Sample


def assign_splits(samples: Sequence[Sample], fractions: dict[str, float], seed: int = 0,
                  min_test_pairs: int = 0) -> list[Sample]:
    """Give every sample a split, the same for all samples of a pair, stratified by
    (category, task). Within a cell, pairs are ordered by a seeded hash of their pair_id and cut
    by the fractions (in the dict's order), so the result depends only on the pair ids and seed.
    `min_test_pairs` raises the test share of small cells up to that many pairs where possible."""
    total = sum(fractions.values())
    cells: dict[tuple[str, str], set[str]] = defaultdict(set)
    for s in samples:
        cells[(s.category, s.task)].add(s.pair_id)
    split_of: dict[str, str] = {}
    names = list(fractions)
    for _cell, pair_ids in sorted(cells.items()):
        ordered = sorted(pair_ids, key=lambda p: hashlib.sha256(f"{seed}:{p}".encode()).hexdigest())
        n = len(ordered)
        counts = _largest_remainder(n, [fractions[k] / total for k in names])
        if "test" in fractions and min_test_pairs:
            i = names.index("test")
            want = min(min_test_pairs, n)
            while counts[i] < want:
                j = max((k for k in range(len(names)) if k != i), key=lambda k: counts[k])
                if counts[j] == 0:
                    break
                counts[j] -= 1
                counts[i] += 1
        pos = 0
        for name, c in zip(names, counts, strict=True):
            for p in ordered[pos:pos + c]:
                split_of[p] = name
            pos += c
    return [replace(s, split=split_of[s.pair_id]) for s in samples]


def _largest_remainder(n: int, shares: list[float]) -> list[int]:
    """Integer counts summing to n, as close to n * share as possible (Hamilton's method)."""
    exact = [n * f for f in shares]
    counts = [int(x) for x in exact]
    order = sorted(range(len(shares)), key=lambda k: (-(exact[k] - counts[k]), k))
    for k in order[: n - sum(counts)]:
        counts[k] += 1
    return counts
