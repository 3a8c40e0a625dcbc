"""CLI of the report: ``calimon report RUN``. ``register(app)`` mounts it on the main app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors, progress_factory
from calimon.cli.options import JsonOpt, QuietOpt
from calimon.errors import ExitCode


@cli_errors
def report_cmd(
    run: Annotated[Path, typer.Argument(help="Run folder written by `calimon curve --out DIR`.")],
    out: Annotated[Path | None, typer.Option(help="HTML file to write (default RUN/report.html); the PNGs go next to it.")] = None,
    policy: Annotated[list[Path] | None, typer.Option(help="Escalation policy YAML to summarize (repeatable; default: the policy files in RUN).")] = None,
    spans: Annotated[Path | None, typer.Option(help="spans.jsonl of `calimon spans` (or its folder; default RUN/spans.jsonl if present).")] = None,
    token_scores: Annotated[Path | None, typer.Option(help="token_scores.jsonl of a probe token head (default RUN/token_scores.jsonl if present).")] = None,
    benchmark: Annotated[str | None, typer.Option(help="Benchmark name, samples .jsonl or Inspect log for the transcripts (default: the run's).")] = None,
    store: Annotated[Path | None, typer.Option(help="Run store with the readings (default: the run's).")] = None,
    operating_point: Annotated[str | None, typer.Option(help="Viewer's initial operating point, a name from the table (default FAR<=5%).")] = None,
    max_transcripts: Annotated[int, typer.Option(help="At most this many transcript cards, misses and false alarms first (0: none).")] = 2000,
    screenshot: Annotated[Path | None, typer.Option(help="Also open the report in headless Chromium and save a PNG screenshot here.")] = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Write a self-contained HTML report of a run (curves, calibration, policy, transcripts)."""
    from calimon.calibration.direction import run_inversion_note
    from calimon.report import build_report

    progress = progress_factory(quiet or as_json)
    rep = build_report(run, out, policies=list(policy) if policy else None, spans=spans,
                       token_scores=token_scores, benchmark=benchmark, store=store,
                       operating_point=operating_point, max_transcripts=max_transcripts,
                       progress=progress)
    result = {"inverted": run_inversion_note(run), **rep.to_dict()}
    if screenshot is not None:
        from calimon.report.chromium import check_page

        check = check_page(rep.html, screenshot=screenshot, full_height=2600)
        result["screenshot"] = str(check.screenshot)
        result["browser_errors"] = list(check.errors)
    if as_json:
        typer.echo(json.dumps(result, indent=1))
        if result.get("browser_errors"):
            raise typer.Exit(ExitCode.FAILURE)
        return
    if result["inverted"]:
        typer.echo(result["inverted"])
    typer.echo(f"wrote {rep.html} ({result['bytes'] // 1024} KiB, {rep.n_transcripts} of "
               f"{rep.n_rows} transcripts{_viewer_part(rep)})")
    typer.echo("figures: " + (", ".join(str(p) for p in rep.pngs) if rep.pngs else
                              "none (a run without a curve draws no figure)"))
    for note in rep.notes:
        typer.echo(f"note: {note}")
    from calimon.studies.shift.check import run_check_line

    typer.echo(run_check_line(run))
    if screenshot is not None:
        typer.echo(f"screenshot: {result['screenshot']}")
    for err in result.get("browser_errors", []):
        typer.echo(f"browser error: {err}", err=True)
    if result.get("browser_errors"):
        raise typer.Exit(ExitCode.FAILURE)


def _viewer_part(rep) -> str:
    """What the report line says of the viewer: where it flags at first, or why there is no
    curve."""
    where = f"; viewer at {rep.viewer}" if rep.viewer else ""
    return where if rep.has_curve else "; no curve (too few of a class: the page says why)" + (
        f"; viewer flags at {rep.viewer}" if rep.viewer else "")


def register(app: typer.Typer) -> None:
    """Mount ``report`` on the main CLI."""
    app.command("report")(report_cmd)


__all__ = ["register", "report_cmd"]
