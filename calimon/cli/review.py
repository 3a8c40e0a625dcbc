"""CLI of the review loop against a running `calimon serve --review`: ``calimon review-export URL
OUT`` writes its labelled traffic as a samples JSONL; ``calimon promote URL`` and ``calimon
rollback URL`` change its live policy (docs/review.md, Shadow and promote)."""

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


@cli_errors
def promote_cmd(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://127.0.0.1:8000 (the key in $CALIMON_API_KEY).")],
) -> None:
    """Make the server's shadow candidate live, only if its certificate holds on live labels and its MR gain is beyond its interval (docs/review.md, Shadow and promote)."""
    from calimon.serve.remote import change_lines, change_policy

    for line in change_lines(change_policy(url, "promote")):
        typer.echo(line)


@cli_errors
def rollback_cmd(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://127.0.0.1:8000 (the key in $CALIMON_API_KEY).")],
) -> None:
    """Make the policy live before the server's last promotion live again."""
    from calimon.serve.remote import change_lines, change_policy

    for line in change_lines(change_policy(url, "rollback")):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Mount ``review-export``, ``promote`` and ``rollback`` on the main CLI."""
    app.command("review-export")(review_export_cmd)
    app.command("promote")(promote_cmd)
    app.command("rollback")(rollback_cmd)
