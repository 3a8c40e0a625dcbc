"""A fast slice of benchmarks/guarantees/control.py (the full table:
benchmarks/results/guarantees-control.md): simulated control evaluations at a few hundred
deployments, with a wider tolerance than the table's (95% upper limits <= 2 delta). The
percentile threshold's audit rate is checked to exceed its budget far more often than delta, so
the check of the certified one is not vacuous."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from calimon.numerics.binomial import clopper_pearson

HERE = Path(__file__).resolve().parent.parent / "benchmarks" / "guarantees"
DELTA = 0.05


@pytest.fixture(scope="module")
def sims():
    spec = importlib.util.spec_from_file_location("control_sims", HERE / "control_sims.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["control_sims"] = mod
    spec.loader.exec_module(mod)
    return mod


def upper(k: int, n: int) -> float:
    return clopper_pearson(k, n)[1]


def test_the_certified_audit_rate_and_the_safety_interval_hold_their_level(sims):
    """200 honest runs certify 5% and 10% (not 1%: it abstains); 30 attacks."""
    rng = np.random.default_rng(11)
    sc = sims.SCENARIOS["continuous scores"]
    cells = sims.simulate(sc, 200, 30, (0.01, 0.05, 0.10), 150, rng, boot=False)
    one, five, ten = cells
    assert one.certified == 0 and five.certified == ten.certified == 150
    for c in (five, ten):
        assert c.pct_exceeds / c.runs > 0.4  # ControlArena's threshold: over budget, often
        assert upper(c.cert_exceeds, c.runs) <= 2 * DELTA, c
        assert upper(c.joint_wrong, c.runs) <= 2 * DELTA, c
    for c in cells:
        assert upper(c.pct_missed, c.runs) <= 2 * DELTA, c


def test_ties_and_the_bootstrap_beside_it(sims):
    """Scores on a 0-10 grid: the certificate holds through ties; the bootstrap interval (its
    95%) is computed for every evaluation."""
    rng = np.random.default_rng(12)
    sc = sims.SCENARIOS["scores on a 0-10 grid (ties)"]
    [ten] = sims.simulate(sc, 50, 30, (0.10,), 100, rng)
    assert ten.certified == 100 and len(ten.widths["boot"]) == 100
    assert upper(ten.joint_wrong, ten.runs) <= 2 * DELTA, ten


def test_a_heavier_tailed_honest_traffic_breaks_the_audit_rate(sims):
    """Outside the assumption (new honest traffic unlike the evaluation's) the certified
    threshold exceeds its budget often: the benchmark's no-claim row is not vacuous."""
    rng = np.random.default_rng(13)
    sc = sims.SCENARIOS["new honest traffic heavier-tailed: Beta(2, 5) vs Beta(2, 6)"]
    assert not sc.claimed
    [ten] = sims.simulate(sc, 400, 10, (0.10,), 60, rng, boot=False)
    assert ten.cert_exceeds / ten.runs > 0.5


def test_the_truths_are_closed_form(sims):
    """The simulation's truths against Monte Carlo: the audit rate and the safety of a
    threshold."""
    rng = np.random.default_rng(14)
    sc = sims.SCENARIOS["scores on a 0-10 grid (ties)"]
    h = sc.honest.sample(200_000, rng)
    assert sc.audit_rate(0.5, ">") == pytest.approx(np.mean(h > 0.5), abs=0.005)
    assert sc.audit_rate(0.5, ">=") == pytest.approx(np.mean(h >= 0.5), abs=0.005)
    _, a, ok = sc.draw(1, 200_000, rng)
    caught = a >= 0.6
    assert sc.safety(0.6, ">=") == pytest.approx(
        caught.sum() / (caught.sum() + (~caught & ok).sum()), abs=0.01)
