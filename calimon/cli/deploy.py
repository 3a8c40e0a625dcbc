"""CLI of the deployment tools: ``thresholds``, ``escalate``, ``apply-policy``, ``pin-policy``.

``register(app)`` mounts them as top-level commands. Each calls one library function,
prints a compact table (or JSON with ``--json``) and turns a CalimonError into one line on
stderr and its exit code.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors, json_ready, num, progress_factory, table
from calimon.cli.options import RATE, SHARE, JsonOpt, QuietOpt

_RATE_NAMES = {"far": "FAR (benign auto-blocked)", "mr": "MR (misbehaving auto-passed)",
               "block_rate": "auto-blocked, unlabelled rows"}

RunArg = Annotated[Path, typer.Argument(help="Run directory (its curve.csv) or a scored CSV.")]
ScoreOpt = Annotated[str | None, typer.Option(
    help="Score column: p_cal (calibrated) or p_raw; default: the run's score (curve.json), "
         "else p_cal.")]
DeltaOpt = Annotated[float, typer.Option(help="Each guarantee holds with probability "
                                              ">= 1 - delta.", **RATE)]
SeedOpt = Annotated[int, typer.Option(help="Seed of the pair split when the CSV has no "
                                           "split column.")]


def _run_score(run_dir: Path, score: str | None) -> str:
    """``score`` if given; else the score a run folder's curve.json names (``p_raw`` when the
    run fitted no calibration map, see calimon.numerics.class_support), else ``p_cal``."""
    from calimon.errors import InputError
    from calimon.run_folder import read_curve_json

    if score is not None:
        return score
    try:
        named = read_curve_json(run_dir if run_dir.is_dir() else run_dir.parent).score
    except InputError:
        return "p_cal"
    return named if named in ("p_cal", "p_raw") else "p_cal"


def thresholds_cmd(
    run_dir: RunArg,
    far: Annotated[list[float] | None, typer.Option(
        "--far", help="Certify FAR <= this (repeatable; default 0.05 and 0.10).", **RATE)] = None,
    mr: Annotated[list[float] | None, typer.Option(
        "--mr", help="Certify MR <= this (repeatable).", **RATE)] = None,
    delta: DeltaOpt = 0.05,
    score: ScoreOpt = None,
    seed: SeedOpt = 0,
    new: Annotated[Path | None, typer.Option(
        help="New transcripts the thresholds will meet (samples JSONL, run folder or scored "
             "CSV): runs the shift check and adds shift-aware certificates.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Certify thresholds (FAR or MR <= alpha at 1 - delta) on calib; report rates on test."""
    from calimon.calibration.direction import run_inversion_note
    from calimon.deploy.guarantees import threshold_text, thresholds_run

    def run() -> None:
        fars = [0.05, 0.10] if far is None and mr is None else list(far or [])
        rep = thresholds_run(run_dir, far=fars, mr=list(mr or []), delta=delta,
                             score=_run_score(run_dir, score), seed=seed)
        inverted = run_inversion_note(run_dir)
        if json_out:
            d = {"inverted": inverted, **rep.to_dict()}
            if new is not None:
                d["shift"] = _shift_json(run_dir, new, rep, delta, rep.score, seed)
            typer.echo(json.dumps(json_ready(d), indent=2))
            return
        if inverted:
            typer.echo(inverted)
        typer.echo(f"{rep.source}  score={rep.score}  split: {rep.split}")
        typer.echo(f"calib rows {rep.n_calib}, test rows {rep.n_test}, dropped without a "
                   f"score {rep.n_dropped}")
        rows = []
        for c in rep.checks:
            cert = c.certificate
            rows.append([f"{cert.rate.upper()} <= {num(cert.alpha)}", num(cert.delta),
                         threshold_text(cert.threshold) if cert.certified
                         else "not certified",
                         f"{cert.k}/{cert.n}", num(cert.bound), num(c.test_far),
                         num(c.test_mr)])
        typer.echo(table(["target", "delta", "threshold", "calib k/n", "bound", "test FAR",
                           "test MR"], rows))
        for c in rep.checks:
            if not c.certificate.certified:
                typer.echo(_uncertified_line(c.certificate))
        if new is not None:
            _shift_lines(run_dir, new, rep, delta, rep.score, seed)

    cli_errors(run)()


def _uncertified_line(cert) -> str:
    """Why a target was not certified: the calib split holds fewer samples of its class than
    the least number that certifies it with no error among them."""
    from calimon.deploy.guarantees import samples_needed

    need = samples_needed(cert.alpha, cert.delta)
    cls, error = ("benign", "flagged") if cert.rate == "far" else ("misbehaving", "missed")
    return (f"{cert.rate.upper()} <= {num(cert.alpha)} not certified: it needs at least {need} "
            f"{cls} calibration samples (none of them {error}) at delta {num(cert.delta)}; the "
            f"calib split has {cert.n}")


def _shift_json(run_dir: Path, new: Path, rep, delta: float, score: str, seed: int) -> dict:
    from calimon.errors import CalimonError
    from calimon.studies.shift.check import shift_thresholds

    try:
        return shift_thresholds(
            run_dir, new, delta=delta, score=score, seed=seed,
            far=[c.certificate.alpha for c in rep.checks if c.certificate.rate == "far"],
            mr=[c.certificate.alpha for c in rep.checks if c.certificate.rate == "mr"]).to_dict()
    except CalimonError as exc:
        return {"not_run": str(exc)}


def _shift_lines(run_dir: Path, new: Path, rep, delta: float, score: str, seed: int) -> None:
    """The shift check's line and one shift-aware line per target (`thresholds --new`)."""
    from calimon.errors import CalimonError
    from calimon.studies.shift.check import shift_thresholds

    fars = [c.certificate.alpha for c in rep.checks if c.certificate.rate == "far"]
    mrs = [c.certificate.alpha for c in rep.checks if c.certificate.rate == "mr"]
    try:
        res = shift_thresholds(run_dir, new, far=fars, mr=mrs, delta=delta, score=score,
                               seed=seed)
    except CalimonError as exc:
        typer.echo(f"shift check: not run ({exc})")
        return
    typer.echo(res.report.line())
    for v in res.verdicts:
        typer.echo(f"shift verdict: {v.line()}")
    for a in res.aware:
        typer.echo(f"shift-aware: {a.message()}")


def escalate_cmd(
    run_dir: RunArg,
    out: Annotated[Path, typer.Option(help="Where to write the policy YAML, e.g. "
                                           "configs/policies/NAME.yaml.")],
    budget: Annotated[float | None, typer.Option(
        help="Largest fraction of traffic sent to human review.", **SHARE)] = None,
    cost_miss: Annotated[float, typer.Option(help="Cost of a misbehaving transcript "
                                                  "auto-passed.")] = 1.0,
    cost_false_block: Annotated[float, typer.Option(help="Cost of a benign transcript "
                                                         "auto-blocked.")] = 1.0,
    cost_review: Annotated[float, typer.Option(help="Cost of one human review.")] = 0.0,
    far_alpha: Annotated[float | None, typer.Option(
        help="Certify FAR of auto-block <= this.", **RATE)] = None,
    mr_alpha: Annotated[float | None, typer.Option(
        help="Certify MR of auto-pass <= this.", **RATE)] = None,
    delta: DeltaOpt = 0.05,
    score: ScoreOpt = None,
    seed: SeedOpt = 0,
    name: Annotated[str | None, typer.Option(help="Policy name (default: file stem).")] = None,
    model: Annotated[str | None, typer.Option(help="Model name (default: run metadata).")] = None,
    readout: Annotated[str | None, typer.Option(help="Readout (default: run metadata).")] = None,
    calibration: Annotated[str | None, typer.Option(
        help="Calibration method (default: run metadata).")] = None,
    audit_fraction: Annotated[float, typer.Option(
        help="Also send this fraction of auto_pass / auto_block decisions to review (the "
             "audit slice `calimon recertify` uses).", **SHARE)] = 0.0,
    audit_seed: Annotated[int, typer.Option(help="Seed of the audit slice.")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Design an auto-pass / review / auto-block policy on calib; report it on test; save it."""
    from calimon.calibration.direction import run_inversion_note
    from calimon.deploy.guarantees import threshold_text
    from calimon.deploy.policies import escalate_run

    def run() -> None:
        rep = escalate_run(run_dir, out, name=name, budget=budget, cost_miss=cost_miss,
                           cost_false_block=cost_false_block, cost_review=cost_review,
                           far_alpha=far_alpha, mr_alpha=mr_alpha, delta=delta,
                           score=_run_score(run_dir, score),
                           seed=seed, model=model, readout=readout, calibration=calibration,
                           audit_fraction=audit_fraction, audit_seed=audit_seed)
        inverted = run_inversion_note(run_dir)
        if json_out:
            typer.echo(json.dumps(json_ready({"inverted": inverted, **rep.to_dict()}), indent=2))
            return
        if inverted:
            typer.echo(inverted)
        d = rep.design
        typer.echo(f"policy {rep.policy.name!r} written to {rep.path}  split: {rep.split}")
        typer.echo(f"auto_pass if {rep.policy.score} < {threshold_text(d.t_low)}; auto_block "
                   f"if >= {threshold_text(d.t_high)}; human_review in between (reviewers "
                   "assumed right)")
        rows = [[name_, str(st.n), num(st.review_rate), num(st.mr), num(st.far),
                 num(st.coverage), num(st.risk)]
                for name_, st in (("calib (design)", d.stats), ("test", rep.test))]
        typer.echo(table(["split", "n", "review rate", "MR", "FAR", "coverage", "risk"],
                          rows))
        for g in d.guarantees:
            what = "auto_block FAR" if g.rate == "far" else "auto_pass MR"
            state = (f"certified, bound {num(g.bound)} ({g.k}/{g.n})" if g.certified
                     else "not certifiable: action switched off")
            typer.echo(f"guarantee: {what} <= {num(g.alpha)} at {num(1 - g.delta)}: {state}")
        if rep.n_dropped:
            typer.echo(f"{rep.n_dropped} row(s) without a score were left out")
        if rep.pin_note():
            typer.echo(rep.pin_note())

    cli_errors(run)()


def pin_policy_cmd(
    policy: Annotated[Path, typer.Argument(help="A version-1 policy YAML.")],
    run: Annotated[Path, typer.Option(help="Its design run: the run folder (or scored CSV) "
                                           "its provenance source_sha256 names.")],
    out: Annotated[Path | None, typer.Option(help="Where to write the pinned policy "
                                                  "(default: over POLICY).")] = None,
) -> None:
    """Pin a version-1 policy: embed its design run's calibration map and monitor (version 2),
    so that calimon serve and the integrations decide the same from any folder."""
    from calimon.deploy.pinned import pin_policy

    def run_() -> None:
        pinned = pin_policy(policy, run, out)
        pin = pinned.pin
        what = (f"map {pin.map_sha256}" if pin is not None and pin.map_sha256 else "no map")
        typer.echo(f"policy {pinned.name!r} pinned to its design run {run} ({what}) "
                   f"in {out or policy}")

    cli_errors(run_)()


def apply_policy_cmd(
    policy: Annotated[Path, typer.Argument(help="Policy YAML (from `calimon escalate`).")],
    scored: Annotated[Path, typer.Argument(help="Scored CSV (curve.csv layout; labels not "
                                                "needed).")],
    out: Annotated[Path, typer.Option(help="Where to write decisions.csv.")],
    samples: Annotated[Path | None, typer.Option(
        help="Samples JSONL of the scored transcripts, for the shift check (default: the "
             "benchmark named by the curve.json next to SCORED).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Apply a policy designed for another model or readout anyway "
                        "(recorded in the output).")] = False,
    quiet: QuietOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Decide auto_pass / human_review / auto_block for each scored transcript."""
    from calimon.deploy.guarantees import threshold_text
    from calimon.deploy.policies import apply_policy_file
    from calimon.studies.shift.check import policy_shift

    def run() -> None:
        rep = apply_policy_file(policy, scored, out, force=force)
        design = rep.design_note()
        line, targets = (("shift check: not run (the scored rows are the policy's own design "
                          "run)", []) if design else policy_shift(
                             policy, scored, samples, progress_factory(quiet or json_out)))
        if json_out:
            typer.echo(json.dumps(json_ready({**rep.to_dict(), "shift_check": line,
                                              "shift_targets": targets}), indent=2))
            return
        if rep.forced:
            typer.echo("WARNING: applied with --force to another monitor's run: "
                       + "; ".join(rep.forced))
        if design:
            typer.echo(design)
        total = sum(rep.counts.values())
        typer.echo(f"{total} decision(s) written to {rep.out}")
        typer.echo(table(["action", "count", "share"],
                          [[a, str(c), num(c / total if total else math.nan)]
                           for a, c in rep.counts.items()]))
        if rep.n_unscored:
            typer.echo(f"{rep.n_unscored} row(s) had no score and got the policy's 'unscored' "
                       f"action")
        if rep.rates:
            typer.echo(table(["realized", "threshold", "k/n", "rate", "95% interval"],
                              [[_RATE_NAMES[r["rate"]], threshold_text(r["threshold"])
                                if r["threshold"] is not None else "inf", f"{r['k']}/{r['n']}",
                                num(r["estimate"]), f"[{num(r['low'])}, {num(r['high'])}]"]
                               for r in rep.rates]))
            typer.echo("(exact Clopper-Pearson intervals over the scored rows of each label)")
        if rep.audit_fraction:
            typer.echo(f"{rep.n_review} transcript(s) go to review: the review band plus an "
                       f"audit slice of {rep.audit_fraction:g} of the automatic decisions")
        typer.echo(line)

    cli_errors(run)()



def register(app: typer.Typer) -> None:
    """Mount ``thresholds``, ``escalate``, ``apply-policy`` and ``pin-policy`` on the main
    CLI."""
    app.command("thresholds")(thresholds_cmd)
    app.command("escalate")(escalate_cmd)
    app.command("apply-policy")(apply_policy_cmd)
    app.command("pin-policy")(pin_policy_cmd)
