"""CLI of the shift tools: ``calimon shift`` and ``calimon recertify``.

``register(app)`` mounts both on the main app. Each command calls one library function
(:mod:`calimon.studies.shift`), prints a compact report (or JSON with ``--json``) and turns a
CalimonError into one line on stderr and its exit code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors, json_ready, num
from calimon.cli.options import RATE, JsonOpt
from calimon.errors import InputError


@cli_errors
def shift_cmd(
    calib_run: Annotated[Path, typer.Argument(help="Calibration run folder (its curve.csv and "
                                                   "curve.json) or scored CSV.")],
    new_set: Annotated[Path, typer.Argument(help="New transcripts: a samples JSONL (labels not "
                                                 "needed) or a run folder / scored CSV.")],
    far: Annotated[list[float] | None, typer.Option(
        "--far", help="Also certify FAR <= this on the new data (repeatable; default 0.05).",
        **RATE)]
        = None,
    mr: Annotated[list[float] | None, typer.Option(
        "--mr", help="Also certify MR <= this on the new data (repeatable).", **RATE)] = None,
    delta: Annotated[float, typer.Option(help="Each certificate holds with probability "
                                              ">= 1 - delta.", **RATE)] = 0.05,
    permutations: Annotated[int, typer.Option(help="Permutations of the two-sample test.")]
        = 200,
    score: Annotated[str, typer.Option(help="Score column the thresholds read.")] = "p_cal",
    seed: Annotated[int, typer.Option(help="Seed of the folds, permutations, rejection "
                                           "sampling and the pair split.")] = 0,
    calib_samples: Annotated[Path | None, typer.Option(
        help="Samples JSONL of the calibration run (default: the run's benchmark).")] = None,
    new_samples: Annotated[Path | None, typer.Option(
        help="Samples JSONL of the new scored CSV (default: its run's benchmark).")] = None,
    max_prevalence: Annotated[float | None, typer.Option(
        help="The most of the new traffic assumed to misbehave, for the verdict's FAR floor "
             "(default: the calibration rows' misbehaving share).")] = None,
    max_detection: Annotated[float | None, typer.Option(
        help="The largest share of the new misbehaving transcripts the monitor is assumed to "
             "flag, for the verdict's FAR floor (default: the upper bound of its detection rate "
             "on the calibration rows; 1: no assumption).")] = None,
    min_prevalence: Annotated[float | None, typer.Option(
        help="The least share of the new traffic assumed to misbehave, for the MR verdict's "
             "miss floor (default: none, no floor).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Does NEW_SET look like the calibration data, and does the difference move the
    certificate? One verdict per target (no shift; shift, certificate holds; shift breaks the
    certificate; for MR, or not judged without labels) with its label plan, then the domain
    AUROC, permutation p-value, what drives it, and naive vs shift-aware certificates on the
    new data."""
    from calimon.deploy.guarantees import threshold_text
    from calimon.studies.shift.check import shift_thresholds

    fars = [0.05] if far is None and mr is None else list(far or [])
    res = shift_thresholds(calib_run, new_set, far=fars, mr=list(mr or []), delta=delta,
                           score=score, seed=seed, permutations=permutations,
                           calib_samples=calib_samples, new_samples=new_samples,
                           max_prevalence=max_prevalence, max_detection=max_detection,
                           min_prevalence=min_prevalence)
    if json_out:
        typer.echo(json.dumps(json_ready(res.to_dict()), indent=2))
        return
    for v in res.verdicts:
        typer.echo(v.line())
    r = res.report
    typer.echo(r.line())
    typer.echo("feature group alone: " + ", ".join(
        f"{g} AUROC {a:.3f}" for g, a in sorted(r.by_group.items(), key=lambda kv: -kv[1])))
    typer.echo(f"new transcripts without a calibration neighbour (P(new|x) > 0.99): "
               f"{r.outside_share:.1%}; density ratios on calibration rows: min "
               f"{r.weights.min():.3g}, max {r.weights.max():.3g}")
    for n, a in zip(res.naive, res.aware, strict=True):
        what = f"{n.rate.upper()} <= {n.alpha:g}"
        naive = (f"threshold {threshold_text(n.threshold)}, bound {num(n.bound)} ({n.k}/{n.n})"
                 if n.certified else "not certified")
        typer.echo(f"{what}: naive (calibration as if exchangeable): {naive}; weighted "
                   f"estimate on the new data {num(a.estimate)} (n_eff {a.ess:.1f} of "
                   f"{a.n_class})")
        typer.echo(f"{what}: shift-aware: {a.message()}")


@cli_errors
def recertify_cmd(
    decisions: Annotated[Path | None, typer.Argument(help="decisions.csv of `calimon "
                                                          "apply-policy` (with review and "
                                                          "inclusion columns).")] = None,
    labels: Annotated[Path | None, typer.Argument(help="Reviewer labels: CSV (id,label) or "
                                                       "JSONL.")] = None,
    serve: Annotated[str | None, typer.Option(
        "--serve", help="Instead of files: the live status of a `calimon serve --review` at "
                        "this URL (its policy's targets; the key in $CALIMON_API_KEY).")] = None,
    far: Annotated[float | None, typer.Option(help="Target FAR of the policy.", **RATE)] = None,
    mr: Annotated[float | None, typer.Option(help="Target MR of the policy.", **RATE)] = None,
    delta: Annotated[float, typer.Option(help="The bounds hold together with probability "
                                              ">= 1 - delta.", **RATE)] = 0.05,
    json_out: JsonOpt = False,
) -> None:
    """Certify a policy's FAR / MR on the traffic it decided, from reviewed labels (the review
    band plus the audit slice): from files, or live from a server's review queue (--serve)."""
    if serve is not None:
        _recertify_live(serve, decisions, labels, far, mr, json_out)
        return
    if decisions is None or labels is None:
        raise InputError("give DECISIONS and LABELS, or --serve URL", field="decisions")
    from calimon.studies.shift.recert_run import recertify_files

    rep = recertify_files(decisions, labels, delta=delta, far_alpha=far, mr_alpha=mr)
    if json_out:
        typer.echo(json.dumps(json_ready(rep.to_dict()), indent=2))
        return
    for s in rep.strata.values():
        typer.echo(f"{s.action:13} {s.size} decided, {s.labelled} labelled "
                   f"(inclusion {s.inclusion:g}), {s.benign} benign among them")
    typer.echo(f"labels used {rep.n_labels_used}, ignored (outside the review sample) "
               f"{rep.n_labels_ignored}, reviewed without a label (counted as the worst case) "
               f"{rep.n_reviewed_unlabelled}")
    for c in (rep.far, rep.mr):
        line = (f"{c.rate.upper()} on this traffic: estimate {num(c.estimate)}, fixed-n upper "
                f"bound {num(c.bound)} at {1 - c.delta:g} (valid read once, on this finished "
                f"sample)")
        if c.alpha is not None:
            need = rep.labels_needed.get(c.rate)
            line += (f"; <= {c.alpha:g}: certified" if c.certified else
                     f"; <= {c.alpha:g}: not certified" + (
                         f" (about {need} labels would be needed at the shares seen)"
                         if need is not None else " (the estimate itself is above the target)"))
        typer.echo(line)


def _recertify_live(url: str, decisions, labels, far, mr, json_out: bool) -> None:
    from calimon.serve.remote import fetch_status, status_lines

    if decisions is not None or labels is not None or far is not None or mr is not None:
        raise InputError("--serve reads the server's labels and its policy's targets: give no "
                         "DECISIONS, LABELS, --far or --mr with it", field="serve")
    st = fetch_status(url)
    if json_out:
        typer.echo(json.dumps(st, indent=2))
        return
    for line in status_lines(st):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Mount `shift` and `recertify` on the main CLI."""
    app.command("shift")(shift_cmd)
    app.command("recertify")(recertify_cmd)
