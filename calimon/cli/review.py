"""CLI of the review queue's export: ``calimon review-export URL OUT`` writes a running
`calimon serve --review`'s labelled traffic as a samples JSONL (docs/serve.md, Review)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors


@cli_errors
def review_export_cmd(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://127.0.0.1:8000 (the key in $CALIMON_API_KEY).")],
    out: Annotated[Path, typer.Argument(help="Samples JSONL to write.")],
    sample: Annotated[str, typer.Option(help="uniform (the resolved transcripts under the first unresolved audit draw: a uniform sample of the traffic, fit for curves and certificates) or all (every label; leans towards the review band).")] = "uniform",
    calib_share: Annotated[float, typer.Option(help="Share of pairs given split 'calib' (the rest 'test'), by a hash of the pair.")] = 0.5,
    category: Annotated[str, typer.Option(help="Category of every sample (served traffic has none of its own).")] = "safety",
    task: Annotated[str, typer.Option(help="Task of every sample.")] = "reasoning",
    source: Annotated[str | None, typer.Option(help="Source of every sample (default: serve:POLICY).")] = None,
) -> None:
    """Export a review queue's labelled traffic as a samples JSONL, for `calimon curve` and `calimon escalate` to make the next policy."""
    from calimon.serve.remote import export_to

    done = export_to(url, out, sample=sample, calib_share=calib_share, category=category,
                     task=task, source=source)
    typer.echo(f"wrote {done.get('exported', 0)} samples to {out} ({done.get('sample')} sample: "
               f"{done.get('misbehavior', 0)} misbehavior, {done.get('benign', 0)} benign; "
               f"{done.get('calib', 0)} calib, {done.get('test', 0)} test)")


def register(app: typer.Typer) -> None:
    """Mount ``review-export`` on the main CLI."""
    app.command("review-export")(review_export_cmd)
