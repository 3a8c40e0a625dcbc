"""`calimon models list`: the model configs and whether their weights are on this machine."""

from __future__ import annotations

import json

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


def register(app: typer.Typer) -> None:
    """Mount ``models`` on the main CLI."""
    app.add_typer(models_app, name="models")
