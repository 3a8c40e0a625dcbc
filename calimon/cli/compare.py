"""CLI of the monitor leaderboard: ``calimon compare RUN...``. ``register(app)`` mounts it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors, json_ready, table
from calimon.cli.options import JsonOpt


@cli_errors
def compare_cmd(
    runs: Annotated[list[Path], typer.Argument(help="Run folders written by `calimon curve --out DIR`.")],
    out: Annotated[Path | None, typer.Option(help="Folder for compare.png and compare.json (default: a new folder under runs/).")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Also write the tables as Markdown to this file.")] = None,
    html: Annotated[Path | None, typer.Option(help="Also write a self-contained HTML page (figure and tables) to this file.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Several curve runs on one MR/FAR plot, with a leaderboard table (AUROC, MR at fixed
    FAR, ECE, binary-protocol points, samples/s)."""
    from calimon.calibration.direction import run_inversion_note
    from calimon.report.compare import build_comparison

    comp = build_comparison(list(runs), out, markdown_file=markdown, html_file=html)
    inverted = {str(r): n for r in runs if (n := run_inversion_note(r))}
    if as_json:
        typer.echo(json.dumps(json_ready({"inverted": inverted, **comp.to_dict()}), indent=1))
        return
    for run, note in inverted.items():
        typer.echo(f"{run}: {note}")
    for w in comp.warnings:
        typer.echo(f"warning: {w}")
    typer.echo(table(comp.headers, comp.table_rows(), rule=True))
    brows = comp.binary_rows()
    if brows:
        typer.echo("\nbinary protocol (MR and FAR over parsed replies):")
        typer.echo(table(comp.binary_headers, brows, rule=True))
    for line in comp.no_curve_lines():
        typer.echo(f"not drawn: {line}")
    typer.echo("wrote " + ", ".join(comp.files.values()))


def register(app: typer.Typer) -> None:
    """Mount ``compare`` on the main CLI."""
    app.command("compare")(compare_cmd)


__all__ = ["compare_cmd", "register"]
