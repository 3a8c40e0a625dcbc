"""Which samples the learning-loop study reads, and their cached features.

Per held-out source (an amb-open v2 source with enough pairs, and humaneval-pairs as a whole):
its **traffic** (``POOL`` samples, whole pairs, of its ``train`` and ``calib`` splits: what a
deployment would see and reviewers would label) and its **held-out part** (``EVAL`` samples of
its ``test`` split, never labelled or trained on). The **original training data** is ``BASE``
samples of every amb-open source's ``train`` split, taken from inside that source's traffic so
that they cost no extra capture; a fold trains on the base rows of the other sources only.
Pairs never straddle the splits (`calimon.data.splits`), so no transcript of the held-out part
is ever in a training set.
"""

from __future__ import annotations

from dataclasses import dataclass

from calimon.data.registry import load_benchmark
from calimon.samples import Sample
from calimon.selection import select_pairs

POOL, EVAL, BASE = 220, 80, 60
MIN_HELD_OUT_PAIRS = 100  # a source with fewer pairs in all is trained on, never held out
# cheapest capture first: a stopped capture leaves whole folds, short transcripts first
ORDER = ("truthfulqa", "gsm8k", "xstest", "humaneval-pairs", "cyberseceval", "sven",
         "humaneval", "mbpp")


@dataclass(frozen=True)
class Fold:
    """One held-out source: its traffic (labels come from here) and its held-out part."""

    name: str
    traffic: tuple[Sample, ...]
    held_out: tuple[Sample, ...]
    excluded_sources: tuple[str, ...]  # amb-open sources a monitor for this fold never sees


@dataclass(frozen=True)
class Selection:
    """The folds (in capture order) and the base training rows by amb-open source."""

    folds: tuple[Fold, ...]
    base: dict[str, tuple[Sample, ...]]

    def samples(self) -> list[Sample]:
        """Every selected sample once, base rows first, then fold by fold."""
        seen: dict[str, Sample] = {}
        for rows in self.base.values():
            seen.update((s.transcript_hash, s) for s in rows)
        for f in self.folds:
            seen.update((s.transcript_hash, s) for s in f.traffic + f.held_out)
        return list(seen.values())


def _fold(name: str, rows: list[Sample], seed: int, excluded: tuple[str, ...]) -> Fold:
    traffic = select_pairs([s for s in rows if s.split in ("train", "calib")], POOL, seed)
    held = select_pairs([s for s in rows if s.split == "test"], EVAL, seed, min_per_class=20)
    return Fold(name, tuple(traffic), tuple(held), excluded)


def select(seed: int = 0, benchmark: str = "amb-open",
           second: str = "humaneval-pairs") -> Selection:
    """The study's samples (module docstring), deterministic in ``seed``."""
    amb = [s for s in load_benchmark(benchmark) if s.label is not None]
    by_source: dict[str, list[Sample]] = {}
    for s in amb:
        by_source.setdefault(s.source, []).append(s)
    folds, base = [], {}
    for src, rows in sorted(by_source.items()):
        fold = _fold(src, rows, seed, (src,))
        base[src] = tuple(select_pairs([s for s in fold.traffic if s.split == "train"]
                                       or [s for s in rows if s.split == "train"], BASE, seed))
        if len({s.pair_id for s in rows}) >= MIN_HELD_OUT_PAIRS:
            folds.append(fold)
    other = [s for s in load_benchmark(second) if s.label is not None]
    # humaneval-pairs is built from the same HumanEval problems as amb-open's humaneval source
    folds.append(_fold(second, other, seed, ("humaneval",)))
    folds.sort(key=lambda f: ORDER.index(f.name) if f.name in ORDER else len(ORDER))
    return Selection(tuple(folds), base)
