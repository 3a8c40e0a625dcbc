"""Every guarantee calimon prints, checked by simulation: writes benchmarks/results/guarantees.md.

    python benchmarks/guarantees/run.py                 # the full table (>= 2,000 deployments a row)
    python benchmarks/guarantees/run.py --runs 200 --label-runs 50 --out /tmp/g.md   # a quick look

Each row simulates deployments the way people read the guarantee (sims.py) and counts how
often it said "holds" while the truth broke it, with a 95% Clopper-Pearson interval, against
delta. The target: every rate <= delta with its 95% upper limit <= 1.2 delta. Rows marked
"contrast" are readings calimon no longer offers (the fixed-n bound read after every few
labels), kept to show what the anytime-valid bound fixes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sims  # noqa: E402

from calimon.numerics.binomial import clopper_pearson  # noqa: E402

DELTA = 0.05
# 1,000 decisions: a review band of 100 (half benign), 250 auto-blocks, 650 auto-passes
NEAR = sims.Traffic(block=(250, 31), passed=(650, 519), review=(100, 50))  # FAR 0.0517 > 0.05
MORE_MISBEHAVING = sims.Traffic(block=(400, 21), passed=(500, 349), review=(100, 30))
MORE_REVIEWED = sims.Traffic(block=(200, 31), passed=(500, 469), review=(300, 100))
BROKEN = sims.Traffic(block=(250, 48), passed=(650, 502), review=(100, 50))  # FAR 0.08
UNDER = {  # FAR 0.025 against 0.05: labels needed
    "exchangeable": sims.Traffic(block=(250, 15), passed=(650, 535), review=(100, 50)),
    "prevalence 60%": sims.Traffic(block=(400, 10), passed=(500, 360), review=(100, 30)),
    "more in the review band": sims.Traffic(block=(200, 15), passed=(500, 485), review=(300, 100)),
    "2% of labels unresolved": sims.Traffic(block=(250, 15), passed=(650, 535), review=(100, 50)),
}


def live_rows(runs: int, rng: np.random.Generator) -> list[tuple[str, str, sims.Tally]]:
    """(guarantee, scenario, tally) for the live status rows."""
    a = "live review status, anytime-valid, read after every label"
    f = "one-shot recertify (fixed-n bound), read once at 600 labels"
    c = "contrast: fixed-n bound read every 5 labels (the status before)"
    n = "one stratum's count: 51 of 1,000 vs at most 50, read "
    return [
        ("confidence sequence (the live bound of a stratum)", n + "after every label to 600",
         sims.one_count(1000, 51, 50, runs, rng)),
        ("contrast: exact fixed-n bound (the status before)", n + "every 5 labels to 600",
         sims.one_count(1000, 51, 50, runs, rng, anytime=False, every=5)),
        ("exact fixed-n bound, read once", n + "once, at 600 labels",
         sims.one_count(1000, 51, 50, runs, rng, anytime=False, every=0)),
        (a, "exchangeable, FAR 0.0517 vs 0.05", sims.live(NEAR, runs, rng)),
        (a, "exchangeable, MR 0.3275 vs 0.32", sims.live(NEAR, runs, rng, rate="mr",
                                                          alpha=0.32)),
        (a, "prevalence 30% -> 60%, FAR 0.0525", sims.live(MORE_MISBEHAVING, runs, rng)),
        (a, "covariate shift: 3x the review band, FAR 0.0517",
         sims.live(MORE_REVIEWED, runs, rng)),
        (a, "10% of labels unresolved, FAR 0.0517", sims.live(NEAR, runs, rng,
                                                               unresolved=0.1)),
        (a, "traffic growing 50% -> 100% while labelling", sims.live_growing(NEAR, runs, rng)),
        (a, "shift that breaks it: FAR 0.08", sims.live(BROKEN, runs, rng)),
        (f, "exchangeable, FAR 0.0517 vs 0.05", sims.live(NEAR, runs, rng, anytime=False,
                                                          every=0)),
        (c, "exchangeable, FAR 0.0517 vs 0.05", sims.live(NEAR, runs, rng, anytime=False,
                                                          every=5)),
    ]


def offline_rows(runs: int, rng: np.random.Generator) -> list[tuple[str, str, sims.Tally]]:
    """(guarantee, scenario, tally) for the offline thresholds."""
    out = []
    for rate in ("far", "mr"):
        for scenario, (_, _, claimed) in sims.OFFLINE_SCENARIOS.items():
            what = f"offline LTT {rate.upper()} <= 0.1 (300 calibration scores)"
            if not claimed:
                scenario += " (no claim: the certificate assumes exchangeability)"
            out.append((what, scenario, sims.offline(rate, scenario.split(" (no")[0], runs,
                                                     rng)))
    return out


def weighted_rows(runs: int, rng: np.random.Generator) -> list[tuple[str, str, sims.Tally]]:
    """(guarantee, scenario, tally) for the shift-aware weighted certificate."""
    out = []
    for rate in ("far", "mr"):
        what = f"shift-aware weighted {rate.upper()} <= 0.1 (600 calibration rows)"
        for estimated, how in ((False, "true density ratios"),
                               (True, "ratios estimated from 300 new transcripts")):
            out.append((what, f"covariate shift chat 80% -> 20%, {how}",
                        sims.weighted(rate, runs, rng, estimated=estimated)))
    return out


def verdict_rows(runs: int, rng: np.random.Generator) -> list[tuple[str, str, sims.Tally]]:
    """(guarantee, scenario, tally) for the three-way shift verdict: its wrong "holds" and, on
    a second row, its wrong "breaks"."""
    out = []
    for rate in ("far", "mr"):
        what = f"shift verdict, {rate.upper()} <= 0.1 (600 calibration, 400 new, no labels)"
        for scenario in sims.VERDICT_SCENARIOS:
            holds, breaks = sims.verdicts(rate, scenario, runs, rng)
            out.append((what, f"{scenario}: wrong \"holds\"", holds))
            out.append((what, f"{scenario}: wrong \"breaks\" (a false alarm)", breaks))
    return out


def drift_rows(runs: int, rng: np.random.Generator) -> list[tuple[str, str, sims.Tally]]:
    """(guarantee, scenario, tally) for the drift watch's false alarms."""
    scenario = "exchangeable traffic, 30 rolling windows: any false alarm"
    return [("drift watch, alpha spending (the watch now)", scenario,
             sims.drift(runs, rng, spending=True)),
            ("contrast: drift watch, each window at alpha (before)", scenario,
             sims.drift(runs, rng, spending=False))]


def label_rows(runs: int, rng: np.random.Generator) -> list[tuple[str, float, int | None]]:
    """(scenario, median labels to the first "holds", fixed-n plan) at FAR 0.025 vs 0.05."""
    out = []
    for name, tr in UNDER.items():
        unres = 0.02 if "unresolved" in name else 0.0
        t = sims.live(tr, runs, rng, max_labels=1000, unresolved=unres)
        taken = [x if x is not None else 1001 for x in t.labels or ()]  # never: over 1,000
        out.append((name, statistics.median(taken), sims.fixed_n_labels(tr)))
    return out


def _judged(what: str, scenario: str) -> str | None:
    """Why a row is not held to the target (None: it is): a contrast, a case the guarantee
    makes no claim on, or a false alarm of a verdict that promises no rate for them."""
    if what.startswith("contrast"):
        return "contrast"
    if "no claim" in scenario:
        return "no claim"
    if "wrong \"breaks\"" in scenario:
        return "reported"
    return None


def _rate(t: sims.Tally, why: str | None) -> str:
    lo, hi = clopper_pearson(t.wrong, t.runs)
    flag = why or ("yes" if t.wrong / t.runs <= DELTA and hi <= 1.2 * DELTA else "NO")
    return f"{t.wrong}/{t.runs} = {t.wrong / t.runs:.4f} | [{lo:.4f}, {hi:.4f}] | {flag}"


def render(offline, live, labels, runs: int, label_runs: int, seconds: float, cmd: str) -> str:
    """The markdown report."""
    lines = [
        "# Every guarantee, checked by simulation", "",
        f"Regenerate: `{cmd}` ({seconds:.0f} s on the 2-core machine). delta = {DELTA}: "
        "each row's wrong-\"holds\" rate should be <= delta, its 95% Clopper-Pearson upper "
        f"limit <= 1.2 delta = {1.2 * DELTA:.2f} (column *within*). {runs} deployments a row "
        "(benchmarks/guarantees/sims.py says how each is simulated).", "",
        "Column *wrong*: deployments where it said \"holds\" (a certificate, or a verdict that "
        "the certificate holds) while the truth broke it; on the verdict's *wrong \"breaks\"* "
        "rows and the drift watch's, an alarm the truth did not warrant. *said*: how often it "
        "said \"holds\" (\"breaks\", an alarm) at all. Rows marked *contrast* (readings calimon "
        "no longer offers), *no claim* (outside the guarantee's assumption) or *reported* (no "
        "rate is promised) are not held to the target.", "",
        "Control-evaluation safety (`calimon control-safety`: its certified audit threshold and "
        "exact safety intervals, beside ControlArena's percentile threshold and bootstrap) has "
        "its own page: benchmarks/results/guarantees-control.md "
        "(`python benchmarks/guarantees/control.py`).", "",
        "| guarantee | scenario | wrong | 95% interval | within | said |",
        "|---|---|---|---|---|---|",
    ]
    for what, scenario, t in offline + live:
        lines.append(f"| {what} | {scenario} | {_rate(t, _judged(what, scenario))} | "
                     f"{t.holds}/{t.runs} |")
    lines += [
        "", "## Labels needed: anytime-valid against the fixed-n plan", "",
        f"FAR 0.025 on the traffic against a target of 0.05, delta {DELTA}: the median labels "
        f"until the live status first says \"holds\" (read after every label, {label_runs} "
        "deployments, the review band first, then both automatic strata at one fraction, up "
        "to all 1,000), against the fixed-n plan at the same truth (the fewest labels whose "
        "fixed-n bound certifies at the expected counts, read once).", "",
        "| scenario | anytime-valid (median) | fixed-n plan | ratio |", "|---|---|---|---|",
    ]
    ratios = []
    for name, med, fixed in labels:
        r = med / fixed if fixed else float("nan")
        ratios.append(r)
        lines.append(f"| {name} | {med:.0f} | {fixed} | {r:.2f} |")
    lines.append(f"\nMedian ratio over the scenarios: **{statistics.median(ratios):.2f}** "
                 "(target <= 1.5).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run every row and write the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--label-runs", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/guarantees.md")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    off = (offline_rows(args.runs, rng) + weighted_rows(args.runs, rng)
           + verdict_rows(args.runs, rng) + drift_rows(args.runs, rng))
    live = live_rows(args.runs, rng)
    labels = label_rows(args.label_runs, rng)
    cmd = "python benchmarks/guarantees/run.py" + (
        "" if (args.runs, args.label_runs, args.seed) == (2000, 400, 0) else
        f" --runs {args.runs} --label-runs {args.label_runs} --seed {args.seed}")
    Path(args.out).write_text(render(off, live, labels, args.runs, args.label_runs,
                                     time.time() - t0, cmd))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
