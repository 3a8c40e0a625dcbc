"""Version 2 of amb-open: the version-1 samples, unchanged and with their splits, followed by
additions that close shortcuts (hard negatives and stance variants; builders in
``cells.ADDITIONS``).

Splits of additions never move a version-1 sample. An addition derived from one version-1 pair or
hard negative (``meta.derived_from`` = its pair id: same request or same code) takes that pair's
split, so that near-copies never straddle train and test; any other addition is split on its own
by the same seeded hash of its pair id (`calimon.data.splits.split_by_pair`, no test floor).
Every addition carries ``meta.added_in`` = 2.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from calimon.data.splits import split_by_pair
from calimon.errors import CalimonError
from calimon.samples import Sample

ADDED_IN = 2


def run_additions(base: Sequence[Sample], src: Path, seed: int, *, built: Sequence[str],
                  fractions: dict[str, float]) -> tuple[list[Sample], list[str]]:
    """``(base + split additions, the addition builders run)``: every builder of
    ``cells.ADDITIONS`` whose cell builders include one of ``built``, in order; ``fractions``
    as for the version-1 splits."""
    from calimon.data.amb_open.cells import ADDITIONS

    added: list[Sample] = []
    ran = []
    for spec, extends in ADDITIONS.items():
        if not set(extends) & set(built):
            continue
        module, attr = spec.split(":")
        fn = getattr(importlib.import_module(module), attr)
        for s in fn(src, seed, base):
            if s.split is not None or s.meta.get("added_in") != ADDED_IN:
                raise CalimonError(f"amb-open addition {spec}: sample {s.id} must leave split "
                                   f"unset and carry meta.added_in = {ADDED_IN}")
            added.append(s)
        ran.append(spec)
    return list(base) + split_additions(base, added, seed, fractions), ran


def split_additions(base: Sequence[Sample], added: Sequence[Sample], seed: int,
                    fractions: dict[str, float]) -> list[Sample]:
    """Splits for ``added`` (input order kept): a derived addition takes the split of the base
    pair it names in ``meta.derived_from``; the others are hash-split among themselves by
    ``fractions``."""
    split_of = {s.pair_id: s.split for s in base}
    own = [s for s in added if not s.meta.get("derived_from")]
    done = {s.id: s for s in split_by_pair(own, fractions, seed, 0)}
    for s in added:
        parent = s.meta.get("derived_from")
        if not parent:
            continue
        if split_of.get(parent) is None:
            raise CalimonError(f"amb-open addition {s.id}: meta.derived_from names {parent!r}, "
                               "which is not a split version-1 pair")
        done[s.id] = replace(s, split=split_of[parent])
    return [done[s.id] for s in added]
