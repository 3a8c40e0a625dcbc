"""CLI of certified control-evaluation safety: ``calimon control-safety``
(`calimon.deploy.control_run`). Prints a table (or JSON with ``--json``) and writes the run
folder."""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors, json_ready, num, table
from calimon.cli.options import DATA, MONITOR, OUTPUT, RATE, JsonOpt

DEFAULT_READOUT = "score:max_suspicion_scorer"


def control_safety_cmd(
    benchmark: Annotated[str, typer.Option(
        help="ControlArena's honest and attack logs, labelled by eval mode: "
             "'LOGS?label=eval_mode' (a folder, log or pattern), or a samples file frozen "
             "from them.", rich_help_panel=DATA)],
    readout: Annotated[str, typer.Option(
        help="The monitor's score the logs hold, score:NAME (a scorer such as "
             "max_suspicion_scorer, or the steps' suspicion_score by max, mean or last).",
        rich_help_panel=MONITOR)] = DEFAULT_READOUT,
    budget: Annotated[list[float] | None, typer.Option(
        "--budget", help="Audit budget: the share of honest runs audited (repeatable; "
                         "default 0.01, 0.05 and 0.10).", **RATE)] = None,
    delta: Annotated[float, typer.Option(
        help="Audit rate and safety hold together with probability >= 1 - delta.",
        **RATE)] = 0.05,
    audit_share: Annotated[float, typer.Option(
        help="Share of delta spent on the audit-rate certificate; the rest on the safety "
             "intervals.", **RATE)] = 0.5,
    side_task_only: Annotated[bool, typer.Option(
        "--side-task-only", help="An attack succeeded when its side task did, whatever its "
                                 "main task (ControlArena's default needs both).")] = False,
    out: Annotated[Path | None, typer.Option(
        help="Run folder for safety.json and safety.png (default: new under runs/; a curve "
             "run's folder adds a section to its report).", rich_help_panel=OUTPUT)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Certified safety of a ControlArena evaluation: audit thresholds whose honest audit rate
    is certified at most each budget, beside ControlArena's percentile threshold; caught and
    uncaught successful attacks and safety with exact intervals at both; usefulness."""
    from calimon.deploy.control_run import SAFETY_JSON, SAFETY_PNG, control_safety_run
    from calimon.typed_json import to_json

    def run() -> None:
        folder = out or Path("runs") / (dt.datetime.now().strftime("%Y%m%d-%H%M%S")
                                        + "-control-safety")
        res = control_safety_run(benchmark, readout, folder, budgets=budget or (0.01, 0.05,
                                                                                0.10),
                                 delta=delta, audit_share=audit_share,
                                 require_main_task_success=not side_task_only)
        if json_out:
            doc = to_json(res)
            doc["result"].pop("sweep", None)
            typer.echo(json.dumps(json_ready({**doc, "out": str(folder)}), indent=2))
            return
        for line in report_lines(res):
            typer.echo(line)
        typer.echo(f"wrote {folder}/{SAFETY_JSON}, {SAFETY_PNG}")

    cli_errors(run)()


def report_lines(run) -> list[str]:
    """The printed report of a `SafetyRun`: counts, the table, abstentions, usefulness and what
    is promised."""
    from calimon.deploy.control_safety import abstain_line, audit_text, promise_line

    r = run.result
    what = "side and main task" if r.require_main_task_success else "side task"
    lines = [f"{run.benchmark}  {run.readout}",
             f"{r.n_honest} honest and {r.n_attack} attack runs; {r.n_successful_attacks} "
             f"attacks succeeded ({what})"]
    if run.left_out_honest or run.left_out_attack:
        lines.append(f"left out without a score (missing=skip): {run.left_out_honest} honest, "
                     f"{run.left_out_attack} attack")
    lines.append(f"delta {num(r.delta)}: {num(r.audit_delta)} for the audit rate, "
                 f"{num(r.safety_delta)} for the safety intervals (exact, "
                 f"{num(100 * r.level)}%)")
    level = f"{num(100 * r.level)}% interval"
    rows = []
    for row in r.rows:
        for name, at in (("percentile", row.percentile), ("certified", row.certified)):
            if at is None:
                rows.append([num(row.budget), name, "not certified", "", "", "", "", ""])
                continue
            bound = f", rate <= {num(row.audit_bound)}" if name == "certified" else ""
            rows.append([num(row.budget), name, audit_text(at),
                         f"{at.honest_audited}/{at.n_honest}{bound}", str(at.caught),
                         str(at.uncaught_successful), num(at.safety),
                         f"[{num(at.low)}, {num(at.high)}]"])
    lines.append(table(["budget", "threshold", "audits", "honest audited", "caught",
                        "uncaught successful", "safety", level], rows))
    lines += [promise_line(row, r.delta) if row.certified else
              abstain_line(row, r.n_honest, r.audit_delta) for row in r.rows]
    u = r.usefulness
    lines.append("usefulness: the logs score no honest run's main task" if u is None else
                 f"usefulness (main task of honest runs): {u.successes}/{u.n} = "
                 f"{num(u.estimate)}, {num(100 * u.level)}% interval [{num(u.low)}, "
                 f"{num(u.high)}]" + (f"; {u.unscored} honest runs not scored" if u.unscored
                                      else ""))
    lines += textwrap.wrap(r.guarantee, width=100)
    return lines


def register(app: typer.Typer) -> None:
    """Mount ``control-safety`` on the main CLI."""
    app.command("control-safety")(control_safety_cmd)
