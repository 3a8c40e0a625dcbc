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


def _with_unpaired(n_pairs: int, n_single: int):
    from dataclasses import replace

    out = _pairs({("safety", "code"): n_pairs})
    out = [replace(s, source="src", meta={"label_quality": "gold", "hard_negative": not s.label})
           for s in out]
    out += [Sample(id=f"h{i}-b", request="q", response="a", label=False, category="safety",
                   task="code", pair_id=f"h{i}", source="src",
                   meta={"unpaired": True, "hard_negative": True}) for i in range(n_single)]
    return out


def test_split_by_pair_splits_real_pairs_and_unpaired_negatives_apart():
    from calimon.data.splits import split_by_pair

    samples = _with_unpaired(20, 6)
    fr = {"train": 0.6, "calib": 0.2, "test": 0.2}
    out = split_by_pair(samples, fr, seed=1, min_test_pairs=8)
    assert [s.id for s in out] == [s.id for s in samples]
    paired = {s.id: s.split for s in assign_splits(samples[:40], fr, 1, 8)}
    single = {s.id: s.split for s in assign_splits(samples[40:], fr, 1)}
    assert {s.id: s.split for s in out} == {**paired, **single}
    assert sum(s.split == "test" for s in out[:40] if s.label) == 8  # the floor, pairs only


def test_split_counts_per_cell_and_split():
    from calimon.data.splits import split_by_pair, split_counts

    out = split_by_pair(_with_unpaired(20, 6), {"train": 0.5, "calib": 0.25, "test": 0.25})
    row = split_counts(out)["safety/code"]
    assert row["pairs"] == {"train": 10, "calib": 5, "test": 5, "total": 20}
    assert row["unpaired_benign"]["total"] == 6 and "hard_negative_benign" not in row
    assert row["pairs_by_source"] == {"src": 20}
    assert row["pairs_by_label_quality"] == {"gold": 20}
    full = split_counts(out, hard_negatives=True)["safety/code"]
    assert full["hard_negative_benign"] == 20 + 6
    bare = [s for s in out if s.label]
    bare = [Sample(**{**s.to_dict(), "meta": {}}) for s in bare]
    assert split_counts(bare)["safety/code"]["pairs_by_label_quality"] == {"unstated": 20}
    assert split_counts(bare, missing_quality="None")["safety/code"][
        "pairs_by_label_quality"] == {"None": 20}
