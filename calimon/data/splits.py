"""Pair-level, cell-stratified split assignment. No pair ever straddles two splits."""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace

from calimon.samples import CATEGORIES, SPLITS, TASKS, Sample


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


def split_by_pair(samples: Sequence[Sample], fractions: dict[str, float], seed: int = 0,
                  min_test_pairs: int = 0) -> list[Sample]:
    """`assign_splits` for a built benchmark: real pairs and unpaired hard negatives
    (``meta.unpaired``) are split separately, so that a test floor of ``min_test_pairs`` per cell
    counts real pairs only; the input order is kept."""
    paired = [s for s in samples if not s.meta.get("unpaired")]
    single = [s for s in samples if s.meta.get("unpaired")]
    done = {s.id: s for s in assign_splits(paired, fractions, seed, min_test_pairs)}
    done.update((s.id, s) for s in assign_splits(single, fractions, seed))
    return [done[s.id] for s in samples]


def split_counts(samples: Sequence[Sample], *, hard_negatives: bool = False,
                 missing_quality: str = "unstated") -> dict:
    """Per cell (``category/task``, in the fixed order of categories x tasks): pairs and unpaired
    benign samples per split and in total, pairs per source and per label quality (a pair
    without one counts as ``missing_quality``) and, with ``hard_negatives``, the benign hard
    negatives. The counts table of a benchmark manifest."""
    out: dict[str, dict] = {}
    for cat in CATEGORIES:
        for task in TASKS:
            cell = [s for s in samples if (s.category, s.task) == (cat, task)]
            if not cell:
                continue
            pairs = [s for s in cell if s.label is True]
            single = [s for s in cell if s.meta.get("unpaired")]
            row = {"pairs": {k: sum(s.split == k for s in pairs) for k in SPLITS},
                   "unpaired_benign": {k: sum(s.split == k for s in single) for k in SPLITS}}
            if hard_negatives:
                row["hard_negative_benign"] = sum(bool(s.meta.get("hard_negative"))
                                                  for s in cell)
            row["pairs_by_source"] = dict(sorted(Counter(s.source for s in pairs).items()))
            row["pairs_by_label_quality"] = dict(sorted(Counter(
                str(s.meta.get("label_quality", missing_quality)) for s in pairs).items()))
            row["pairs"]["total"] = len(pairs)
            row["unpaired_benign"]["total"] = len(single)
            out[f"{cat}/{task}"] = row
    return out
