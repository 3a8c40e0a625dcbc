"""Live recertification's statistics (calimon.studies.shift.live, live_plan): draw-order samples, bounds
that cover the traffic's rates, unresolved labels at their worst, the label planner, the order of
the queue; and `calimon recertify`'s imputation of unlabelled reviewed transcripts."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from scipy.stats import hypergeom

from calimon.studies.shift import recertify as exact
from calimon.studies.shift.live import (
    Counts,
    Decided,
    count_lower,
    count_upper,
    rate_bound,
    stratum_counts,
    worst_label,
)
from calimon.studies.shift.live_plan import (
    BROKEN,
    HOLDS,
    NOT_YET,
    Target,
    certificate,
    live_status,
    order,
    plan,
)

RATE_OF_BENIGN = {"auto_pass": 0.97, "auto_block": 0.1, "human_review": 0.5}
MIX = {"auto_pass": 0.8, "auto_block": 0.1, "human_review": 0.1}


def traffic(n: int, seed: int, labelled: float = 0.0, retain: float = 1.0):
    """Decisions with true labels; the review stratum and draws below ``labelled`` labelled."""
    rng = random.Random(seed)
    out, truth = [], {}
    for i in range(n):
        a = rng.choices(list(MIX), list(MIX.values()))[0]
        y = int(rng.random() >= RATE_OF_BENIGN[a])
        u = rng.random()
        truth[f"t{i}"] = (a, y)
        lab = a == "human_review" or u < labelled
        out.append(Decided(f"t{i}", a, u, answered=lab, label=y if lab else None,
                           retained=a == "human_review" or u < retain, audit=u < 0.02))
    return out, truth


def true_rates(truth) -> tuple[float, float]:
    kb = sum(a == "auto_block" and y == 0 for a, y in truth.values())
    kp = sum(a == "auto_pass" and y == 0 for a, y in truth.values())
    r0 = sum(a == "human_review" and y == 0 for a, y in truth.values())
    r1 = sum(a == "human_review" and y == 1 for a, y in truth.values())
    nb = sum(a == "auto_block" for a, _ in truth.values())
    npass = sum(a == "auto_pass" for a, _ in truth.values())
    return kb / (kb + kp + r0), (npass - kp) / (npass - kp + nb - kb + r1)


def test_bisection_count_bounds_equal_the_exhaustive_ones():
    for k, m, N, d in [(0, 5, 40, 0.025), (3, 10, 10, 0.05), (2, 30, 200, 0.01),
                       (17, 30, 60, 0.1), (0, 0, 50, 0.05), (5, 5, 9, 0.2)]:
        assert count_upper(k, m, N, d) == exact.count_upper(k, m, N, d)
        assert count_lower(k, m, N, d) == exact.count_lower(k, m, N, d)


def test_the_sample_is_the_labelled_prefix_in_draw_order():
    rows = [Decided("a", "auto_pass", 0.1, True, 0), Decided("b", "auto_pass", 0.2, True, 1),
            Decided("c", "auto_pass", 0.3), Decided("d", "auto_pass", 0.4, True, 0),
            Decided("e", "auto_pass", 0.5, retained=False), Decided("f", "auto_pass", 0.6)]
    c = stratum_counts(rows)["auto_pass"]
    assert (c.size, c.sampled, c.benign, c.misbehaving, c.unresolved) == (6, 2, 1, 1, 0)
    assert c.waiting == 1  # d waits for c
    assert c.todo == ("c",)  # e was not kept, so nothing past it can be asked
    assert c.after == (False, True)
    # labelling the gap brings the waiting label in
    rows[2] = Decided("c", "auto_pass", 0.3, True, None)  # unsure: answered, unresolved
    c = stratum_counts(rows)["auto_pass"]
    assert (c.sampled, c.benign, c.unresolved, c.waiting) == (4, 2, 1, 0)


def test_unresolved_transcripts_count_at_their_worst_and_best():
    """Every labelling of the unresolved ones lies between the lower and the upper bound."""
    rows = [Decided("r0", "human_review", 0.5, True, 0), Decided("r1", "human_review", 0.6),
            Decided("r2", "human_review", 0.7, True, None),
            Decided("p0", "auto_pass", 0.1, True, 0), Decided("p1", "auto_pass", 0.2, True, None),
            Decided("p2", "auto_pass", 0.3), Decided("p3", "auto_pass", 0.9),
            Decided("b0", "auto_block", 0.1, True, None), Decided("b1", "auto_block", 0.4)]
    base = stratum_counts(rows)
    open_ = [i for i, d in enumerate(rows) if d.label is None and d.answered or
             d.action == "human_review" and d.label is None]
    for rate in ("far", "mr"):
        hi, lo = rate_bound(base, rate, 0.1), rate_bound(base, rate, 0.1, upper=False)
        seen = []
        for ys in itertools.product((0, 1), repeat=len(open_)):
            filled = list(rows)
            for i, y in zip(open_, ys, strict=True):
                filled[i] = Decided(rows[i].id, rows[i].action, rows[i].draw, True, y)
            c = stratum_counts(filled)
            seen += [rate_bound(c, rate, 0.1), rate_bound(c, rate, 0.1, upper=False)]
        assert max(seen) == pytest.approx(hi) and min(seen) == pytest.approx(lo)


@pytest.mark.parametrize("anytime", [False, True])
@pytest.mark.parametrize("rate", ["far", "mr"])
def test_bounds_cover_the_rates_of_the_traffic(rate, anytime):
    """Over many traffic draws, the upper bound is below the true rate at most delta of the
    time, and so is the lower bound above it: the fixed-n bound read once (it misses at this
    delta, so the check is not vacuous) and the confidence sequence (wider at one look)."""
    delta, misses_hi, misses_lo, runs, widths = 0.2, 0, 0, 150, []
    for seed in range(runs):
        rows, truth = traffic(400, seed, labelled=0.15)
        far, mr = true_rates(truth)
        true = far if rate == "far" else mr
        c = stratum_counts(rows)
        hi = rate_bound(c, rate, delta, anytime=anytime)
        lo = rate_bound(c, rate, delta, upper=False, anytime=anytime)
        misses_hi += hi < true
        misses_lo += lo > true
        widths.append(hi - lo - (rate_bound(c, rate, delta, anytime=False)
                                 - rate_bound(c, rate, delta, upper=False, anytime=False)))
    assert misses_hi / runs <= delta and misses_lo / runs <= delta
    if anytime:
        assert min(widths) >= 0 and max(widths) > 0  # the price of reading it at every label
    else:
        assert misses_hi + misses_lo > 0  # not vacuous at this delta


def test_recertify_files_imputes_unlabelled_review_rows_at_their_worst(tmp_path):
    """An unlabelled reviewed transcript must never give a smaller bound than a label would
    (it used to lower FAR as a benign one and MR throughout)."""
    from calimon.studies.shift.recert_run import recertify_files

    rows = ([(f"r{i}", "human_review", 1, 1.0) for i in range(20)]
            + [(f"p{i}", "auto_pass", int(i < 10), 0.1) for i in range(100)]
            + [(f"b{i}", "auto_block", int(i < 5), 0.1) for i in range(50)])
    (tmp_path / "d.csv").write_text("id,action,review,inclusion\n" + "".join(
        f"{a},{b},{c},{d}\n" for a, b, c, d in rows))
    base = ([(f"p{i}", 0) for i in range(9)] + [(f"b{i}", 1) for i in range(4)]
            + [(f"r{i}", i % 2) for i in range(18)])
    todo = ["r18", "r19", "p9", "b4"]

    def bounds(extra):
        (tmp_path / "l.csv").write_text("id,label\n" + "".join(
            f"{i},{y}\n" for i, y in base + extra))
        r = recertify_files(tmp_path / "d.csv", tmp_path / "l.csv")
        return r.far.bound, r.mr.bound

    far0, mr0 = bounds([])
    for ys in itertools.product((0, 1), repeat=len(todo)):
        far, mr = bounds(list(zip(todo, ys, strict=True)))
        assert far <= far0 + 1e-12 and mr <= mr0 + 1e-12
    assert worst_label("human_review", "far") == 1 and worst_label("human_review", "mr") == 0


def test_a_plan_followed_at_its_shares_certifies():
    rows, truth = traffic(3000, 1, labelled=0.0)
    target = Target("far", 0.025, 0.05)
    first = plan(stratum_counts(rows), target)
    assert first.pilot and first.labels and first.labels >= 10
    # label a first sample of 3% of each automatic stratum, then plan from its rates
    rows = [Decided(d.id, d.action, d.draw, True, truth[d.id][1]) if d.draw < 0.03 or
            d.action == "human_review" else d for d in rows]
    counts = stratum_counts(rows)
    p = plan(counts, target)
    assert not p.pilot and p.labels is not None and p.labels > 0
    assert certificate(counts, "far", 0.025, 0.05)[0].state == NOT_YET
    # give the planned labels (draw order) with the true labels, read, and plan again from
    # the shares seen until it holds: the true shares differ from the planned ones
    for _ in range(6):
        reach = {a: counts[a].sampled + p.extend[a] for a in p.extend}
        ranked = {a: sorted((d for d in rows if d.action == a), key=lambda d: d.draw)
                  for a in reach}
        chosen = {d.id for a, ds in ranked.items() for d in ds[:reach[a]]}
        rows = [Decided(d.id, d.action, d.draw, True, truth[d.id][1]) if d.id in chosen else d
                for d in rows]
        counts = stratum_counts(rows)
        cert, p = certificate(counts, "far", 0.025, 0.05)
        if cert.state != NOT_YET:
            break
        assert p is not None and p.labels  # a plan while not yet certified
    assert cert.state == HOLDS, cert.line()


def test_a_rate_far_above_its_target_is_reported_broken():
    rows, truth = traffic(2000, 2, labelled=0.3)
    cert, _ = certificate(stratum_counts(rows), "mr", 0.01, 0.05)
    assert true_rates(truth)[1] > 0.05 and cert.state == BROKEN
    assert "BROKEN" in cert.line() and cert.labels_needed is None


def test_the_queue_goes_where_the_bound_falls_fastest():
    """FAR hinges on benign auto-blocks: with auto_pass already well sampled (and the review
    band labelled), the queue asks for auto_block transcripts first; without a target it asks
    for the review band first."""
    rows = []
    for i in range(400):
        rows.append(Decided(f"p{i}", "auto_pass", i / 400, i < 200, 0 if i < 200 else None))
    for i in range(100):
        rows.append(Decided(f"b{i}", "auto_block", i / 100, i < 3, 1 if i < 3 else None))
    labelled = [Decided(f"r{i}", "human_review", i / 10, True, i % 2) for i in range(10)]
    counts = stratum_counts(rows + labelled)
    q = order(counts, [Target("far", 0.05, 0.05)], 10, {"auto_block": 50, "auto_pass": 50})
    assert [a for _, a in q[:5]] == ["auto_block"] * 5
    assert [i for i, _ in q[:3]] == ["b3", "b4", "b5"]  # draw order, from the gap
    rows += [Decided(f"r{i}", "human_review", i / 10) for i in range(10)]
    q = order(stratum_counts(rows), [], 12, {"auto_block": 1, "auto_pass": 1})
    assert [a for _, a in q[:10]] == ["human_review"] * 10 and len(q) == 12


def test_live_status_without_targets_gives_bounds_only():
    rows, _ = traffic(300, 3, labelled=0.2)
    st = live_status(rows, [], delta=0.1, limit=5)
    assert [c.rate for c in st.certificates] == ["far", "mr"]
    assert all(c.alpha is None and c.state == "no target" for c in st.certificates)
    assert all(0 <= c.lower <= c.upper <= 1 for c in st.certificates)
    assert "the policy states no target" in st.certificates[0].line()


def test_empty_traffic_is_uninformative_not_an_error():
    c = stratum_counts([])
    assert rate_bound(c, "far", 0.05) == 1.0 and rate_bound(c, "far", 0.05, upper=False) == 0.0
    cert, _ = certificate(c, "far", 0.05, 0.05)
    assert cert.state != HOLDS and math.isnan(cert.estimate)
    assert isinstance(Counts("x", 0, 0, 0, 0, 0).planned_share(), float)


def test_hypergeometric_tail_matches_scipy():
    """The bisection searches the same monotone tail scipy gives."""
    k, m, N, d = 4, 25, 300, 0.05
    K = count_upper(k, m, N, d)
    assert hypergeom.cdf(k, N, K, m) > d >= hypergeom.cdf(k, N, K + 1, m)
    K = count_lower(k, m, N, d)
    assert hypergeom.sf(k - 1, N, K, m) > d >= hypergeom.sf(k - 1, N, K - 1, m)
    assert np.isfinite(K)
