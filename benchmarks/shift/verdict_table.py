"""The verdict section of benchmarks/results/shift.md: per held-out source and readout, the
harmful-or-harmless verdict (calimon.studies.shift.verdict, no labels of the source) against the naive
threshold's realized FAR there, and how often each verdict was right."""

from __future__ import annotations

CONTROL = "control (no shift)"
KINDS = ("no shift", "shift, certificate holds", "shift breaks the certificate",
         "shift, not judged without labels")


def _f(x, digits=3) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    return f"{x:.{digits}f}"


def _ci(rate: float, n: int) -> tuple[float, float]:
    from calimon.deploy.guarantees import clopper_pearson

    return clopper_pearson(int(round(rate * n)), n, 0.95)


def _summary(rows: list[dict], label: str) -> list[str]:
    out = []
    for kind in KINDS:
        got = [r for r in rows if r.get("verdict") == kind]
        if not got:
            out.append(f"- {label}, **{kind}**: never given.")
            continue
        right = sum(bool(r["verdict_right"]) for r in got)
        clear = [r for r in got if not r["verdict_right"]
                 and (_ci(r["naive_far_new"], r["n_new_benign"])[0] > r["alpha"]
                      if kind != KINDS[2] else
                      _ci(r["naive_far_new"], r["n_new_benign"])[1] <= r["alpha"])]
        out.append(f"- {label}, **{kind}**: given in {len(got)} case(s), right in {right} "
                   f"({right / len(got):.0%}); of the wrong ones, {len(clear)} are wrong beyond "
                   f"the realized FAR's 95% interval.")
    return out


def verdict_section(all_rows: list[dict]) -> list[str]:
    """Markdown lines: the definition, the per-verdict summary and the per-fold table."""
    if not all_rows or "verdict" not in all_rows[0]:
        return ["## Harmful or harmless shift: the verdict", "",
                "Not in these results (run_shift.py before the verdict existed).", ""]
    held = [r for r in all_rows if r["source"] != CONTROL]
    ctrl = [r for r in all_rows if r["source"] == CONTROL]
    out = ["## Harmful or harmless shift: the verdict against the realized FAR", "",
           "For every held-out source, readout and target: the verdict printed by "
           "`calimon shift` (no labels of the source), computed at the naive threshold from the "
           "FAR floor (the source's flag rate there, its Clopper-Pearson lower bound at 1 - "
           "delta/2, a prevalence cap equal to the calibration rows' misbehaving share, a "
           "detection cap equal to the upper bound of the monitor's detection rate on the "
           "calibration rows) and the weighted FAR estimate (read only where its n_eff reaches "
           "the rows that could certify alpha at all; `n/r`: not read). A verdict is **right** when it says *breaks* exactly where "
           "the naive threshold's realized FAR on the source is above alpha. Realized rates rest "
           "on ~40 benign transcripts per source, so a verdict can be wrong by one or two false "
           "alarms; the last clause of each line counts the wrong ones that the realized FAR's "
           "95% interval puts clearly on the other side of alpha.", "",
           "**These figures are in-sample for the rule.** The rule was revised once after its "
           "first run on this study: without the detection cap, and with the weighted estimate "
           "read at any n_eff, it was right in 28 of 32 held-out cases (the three cyberseceval "
           "rows it called *holds*, and humaneval/verdict/0.1, called *breaks* on a weighted "
           "estimate of 0.52 resting on n_eff 3.6). Judge it on sources it has not seen.", "",
           *_summary(held, "held-out sources"), *_summary(ctrl, "control (no shift)"), "",
           "| source | readout | alpha | verdict | flagged on S | detection cap | FAR floor | "
           "weighted FAR (n_eff) | realized FAR on S [95% CI] | right |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in all_rows:
        lo, hi = _ci(r["naive_far_new"], r["n_new_benign"])
        right = "-" if r["verdict_right"] is None else ("yes" if r["verdict_right"] else "**no**")
        out.append(f"| {r['source']} | {r['readout']} | {r['alpha']:g} | {r['verdict']} | "
                   f"{_f(r['verdict_flag_rate'])} | {_f(r['verdict_tpr_cap'])} | "
                   f"{_f(r['verdict_far_floor'])} | {_f(r['weighted_far'])} "
                   f"({_f(r['ess_neg'], 1)}{'' if r['verdict_weighted_read'] else ', n/r'}) | "
                   f"{_f(r['naive_far_new'])} [{lo:.2f}, {hi:.2f}] | {right} |")
    return [*out, ""]
