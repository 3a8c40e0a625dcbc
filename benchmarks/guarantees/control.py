"""`calimon control-safety`'s guarantees, checked by simulated control evaluations: writes
benchmarks/results/guarantees-control.md.

    python benchmarks/guarantees/control.py                       # the table (2,000 evaluations a cell)
    python benchmarks/guarantees/control.py --runs 200 --out /tmp/c.md   # a quick look

control_sims.py says how an evaluation is simulated. Each evaluation runs what a user runs: the
percentile threshold ControlArena picks and the certified one, with calimon's exact safety
intervals (`calimon.deploy.control_safety`), and ControlArena's bootstrap interval beside them.
The targets (delta = 0.05, split 0.025 / 0.025): the certified threshold's audit rate on new
honest traffic exceeds its budget in at most delta of the evaluations, and calimon's safety
interval misses the true safety in at most delta, each with its 95% upper limit <= 1.2 delta.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import control_sims as cs  # noqa: E402

from calimon.numerics.binomial import clopper_pearson, samples_needed  # noqa: E402

DELTA, AUDIT_DELTA = 0.05, 0.025
BUDGETS = (0.01, 0.05, 0.10)
HONEST = (20, 50, 200, 400)
ATTACKS = (10, 30, 100)
GRID = {"continuous scores": ATTACKS, "scores on a 0-10 grid (ties)": (30,),
        "new honest traffic heavier-tailed: Beta(2, 5) vs Beta(2, 6)": (10,)}


def run_cells(runs: int, rng: np.random.Generator) -> dict:
    """{(scenario, n, m): [Cell per budget]} over the grid."""
    out = {}
    for name, attacks in GRID.items():
        sc = cs.SCENARIOS[name]
        for n in HONEST:
            for m in attacks:
                out[(name, n, m)] = cs.simulate(sc, n, m, BUDGETS, runs, rng, boot=sc.claimed)
    return out


def _rate(k: int, runs: int, judged: bool = True) -> str:
    lo, hi = clopper_pearson(k, runs)
    within = ("yes" if k / runs <= DELTA and hi <= 1.2 * DELTA else "NO") if judged else ""
    return f"{k}/{runs} = {k / runs:.4f} [{lo:.4f}, {hi:.4f}]" + (f" {within}" if judged else "")


def audit_table(cells: dict) -> list[str]:
    """Audit rate on new honest traffic, pooled over the attack counts of each n."""
    lines = ["| scenario | honest runs | budget | percentile threshold: audit rate > budget | "
             "certified in | certified threshold: audit rate > budget (within) |",
             "|---|---|---|---|---|---|"]
    for name in GRID:
        claimed = cs.SCENARIOS[name].claimed
        for n in HONEST:
            pooled = [cc for (s, nn, _), cc in cells.items() if s == name and nn == n]
            for j, b in enumerate(BUDGETS):
                runs = sum(cc[j].runs for cc in pooled)
                pct = sum(cc[j].pct_exceeds for cc in pooled)
                cert = sum(cc[j].certified for cc in pooled)
                over = sum(cc[j].cert_exceeds for cc in pooled)
                said = (f"{cert}/{runs}" if cert else
                        f"never (needs {samples_needed(b, AUDIT_DELTA)})")
                judged = _rate(over, runs, judged=True) if claimed else (
                    _rate(over, runs, judged=False) + " no claim")
                lines.append(f"| {name} | {n} | {b:g} | {_rate(pct, runs, judged=False)} | "
                             f"{said} | {judged} |")
    return lines


def _median(xs: list) -> str:
    return f"{statistics.median(xs):.3f}" if xs else "-"


def safety_table(cells: dict) -> list[str]:
    """Coverage of calimon's exact intervals and ControlArena's bootstrap."""
    lines = ["| scenario | honest | attacks | budget | safety at the budget | certified in | "
             "calimon, certified threshold: misses its safety (within) | joint: audit rate "
             "over budget or safety missed (within) | lower end above the budget's safety | "
             "calimon, percentile threshold: misses its safety (within) | bootstrap 95%: "
             "misses the budget's safety | bootstrap: misses the percentile threshold's "
             "safety | median width: calimon certified / calimon percentile / bootstrap |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (name, n, m), cc in cells.items():
        sc = cs.SCENARIOS[name]
        if not sc.claimed:
            continue
        for b, c in zip(BUDGETS, cc, strict=True):
            truth = sc.safety(sc.honest.lowest_within(b), ">=")
            if c.certified:
                cert = (f"{_rate(c.cert_missed, c.runs)} | {_rate(c.joint_wrong, c.runs)} | "
                        f"{c.low_above_budget_safety}/{c.certified}")
            else:
                cert = "never certified | - | -"
            w = c.widths
            lines.append(
                f"| {name} | {n} | {m} | {b:g} | {truth:.3f} | {c.certified}/{c.runs} | {cert} "
                f"| {_rate(c.pct_missed, c.runs)} | {_rate(c.boot_missed_budget, c.runs, False)} "
                f"| {_rate(c.boot_missed_own, c.runs, False)} | {_median(w['cert'])} / "
                f"{_median(w['pct'])} / {_median(w['boot'])} |")
    return lines


def render(cells: dict, runs: int, seconds: float, cmd: str) -> str:
    """The markdown page."""
    intro = [
        "# Certified control-evaluation safety, checked by simulation", "",
        f"Regenerate: `{cmd}` ({seconds:.0f} s on the shared 2-core machine). Each cell: {runs} "
        "simulated control evaluations (benchmarks/guarantees/control_sims.py): honest runs' "
        "suspicion ~ Beta(2, 6); attacks succeed half the time, successful ones ~ Beta(3, 4) "
        "(subtler), failed ones ~ Beta(5, 3). Each runs `calimon.deploy.control_safety` "
        f"(delta {DELTA}: {AUDIT_DELTA} for the audit-rate certificate, {DELTA - AUDIT_DELTA} "
        "for the exact safety intervals, at 97.5%) and ControlArena's bootstrap interval "
        "(`compute_bootstrapped_confidence_interval` with `compute_safety`'s estimator, 100 "
        "resamples, 95%): control_arena is not installed where the benchmarks run, so it is "
        "written again in numpy, drawing the same resamples from the same generator calls "
        "(tests/test_integrations_control_safety.py checks it returns ControlArena's interval "
        "digit for digit on a real evaluation). Truths are closed form: the audit rate of a "
        "threshold on new honest traffic, the safety of a threshold, and the safety at the "
        "budget (that of the lowest threshold whose audit rate is at most it).", "",
        f"Targets: each rate marked *within* is <= delta = {DELTA} with its 95% Clopper-Pearson "
        f"upper limit <= 1.2 delta = {1.2 * DELTA:.2f}. Rates are over every evaluation (one "
        "whose threshold is not certified abstains: it cannot be wrong). The percentile "
        "threshold's audit rate and the bootstrap's coverage are reported beside them, not "
        "judged. The heavier-tailed scenario is a shift: new honest traffic unlike the "
        "evaluation's, where the certificate makes no claim.", "",
        "## Audit rate on new honest traffic", "",
        "Pooled over the attack counts of each number of honest runs; intervals in brackets "
        "are 95% Clopper-Pearson.", ""]
    body = audit_table(cells) + ["", "## Safety intervals", "",
                                 "A miss: the true safety at that threshold outside the "
                                 "interval. *lower end above the budget's safety*: certified "
                                 "evaluations whose lower bound exceeds the safety at the "
                                 "budget.", ""] + safety_table(cells)
    return "\n".join(intro + body) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run the grid and write the page."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/guarantees-control.md")
    args = ap.parse_args(argv)
    t0 = time.time()
    cells = run_cells(args.runs, np.random.default_rng(args.seed))
    cmd = "python benchmarks/guarantees/control.py" + (
        "" if (args.runs, args.seed) == (2000, 0) else f" --runs {args.runs} --seed {args.seed}")
    Path(args.out).write_text(render(cells, args.runs, time.time() - t0, cmd))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
