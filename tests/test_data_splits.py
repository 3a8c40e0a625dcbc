from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from calimon.data.splits import _largest_remainder, assign_splits
from calimon.samples import Sample


def _pairs(n_per_cell):
    out = []
    for (cat, task), n in n_per_cell.items():
        for i in range(n):
            pid = f"{cat}-{task}-{i}"
            for lab in (True, False):
                out.append(Sample(id=f"{pid}-{int(lab)}", request="r", response=f"{pid}{lab}",
                                  label=lab, category=cat, task=task, pair_id=pid))
    return out


def test_pairs_never_straddle_and_cells_are_stratified():
    samples = _pairs({("safety", "qa"): 50, ("sycophancy", "code"): 17})
    out = assign_splits(samples, {"train": 0.6, "calib": 0.2, "test": 0.2}, seed=3)
    by_pair = {}
    for s in out:
        by_pair.setdefault(s.pair_id, set()).add(s.split)
    assert all(len(v) == 1 for v in by_pair.values())
    counts = Counter((s.category, s.split) for s in out if s.label)
    assert counts[("safety", "train")] == 30 and counts[("safety", "test")] == 10
    assert sum(v for (c, _), v in counts.items() if c == "sycophancy") == 17


def test_deterministic_and_seed_dependent():
    samples = _pairs({("safety", "qa"): 40})
    a = assign_splits(samples, {"train": 0.5, "test": 0.5}, seed=1)
    b = assign_splits(list(reversed(samples)), {"train": 0.5, "test": 0.5}, seed=1)
    c = assign_splits(samples, {"train": 0.5, "test": 0.5}, seed=2)
    split = {s.id: s.split for s in a}
    assert all(split[s.id] == s.split for s in b)
    assert any(split[s.id] != s.split for s in c)


def test_min_test_pairs_raises_small_test_share():
    samples = _pairs({("safety", "qa"): 100})
    out = assign_splits(samples, {"train": 0.6, "calib": 0.2, "test": 0.2}, min_test_pairs=40)
    assert sum(1 for s in out if s.split == "test" and s.label) == 40


@settings(max_examples=200)
@given(st.integers(0, 500), st.lists(st.floats(0.01, 1.0), min_size=1, max_size=5))
def test_largest_remainder_sums_exactly(n, weights):
    shares = [w / sum(weights) for w in weights]
    counts = _largest_remainder(n, shares)
    assert sum(counts) == n
    assert all(abs(c - n * f) < 1 + 1e-9 for c, f in zip(counts, shares, strict=True))
