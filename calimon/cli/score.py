"""`calimon score`: score a benchmark with one monitor into the run store, on any backend
(transformers, vllm, http) and engine (local, ray), and export the readings as JSONL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors, progress_factory, usage_line
from calimon.cli.options import (
    DEFAULT_BENCHMARK,
    DEFAULT_MODEL,
    DEFAULT_PROMPT,
    DEFAULT_READOUT,
    DEFAULT_SEED,
    DEFAULT_STORE,
    BenchmarkOpt,
    DefenseOpt,
    ForceOpt,
    JsonOpt,
    LimitOpt,
    ModelOpt,
    PromptOpt,
    QuietOpt,
    StoreOpt,
    TruncationOpt,
    backend_flags,
    settings_from,
)


@cli_errors
@backend_flags
def score_cmd(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    benchmark: BenchmarkOpt = DEFAULT_BENCHMARK,
    prompt: PromptOpt = DEFAULT_PROMPT,
    readout: Annotated[str, typer.Option(help="verdict, json, binary or probe:<head>.")] = DEFAULT_READOUT,
    defense: DefenseOpt = None,
    force: ForceOpt = False,
    limit: LimitOpt = None,
    truncation: TruncationOpt = "head_tail",
    seed: Annotated[int, typer.Option(help="Seed for --limit's pair selection.")] = DEFAULT_SEED,
    chunk_size: Annotated[int, typer.Option(help="Samples per Ray task, and the most per store commit of a local run (its chunks are paced: the first of one sample, then about 2 s of work each).")] = 32,
    store: StoreOpt = DEFAULT_STORE,
    export: Annotated[Path | None, typer.Option(help="Write every reading as JSONL here.")] = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
):
    """Score a benchmark with one monitor into the run store (any backend, local or Ray)."""
    from calimon.scoring.engines import RunSettings, score_benchmark

    settings = settings_from(RunSettings, ctx.params)
    summary = score_benchmark(settings, chunk_size=chunk_size, export=export,
                              progress=progress_factory(quiet or as_json))
    if as_json:
        typer.echo(json.dumps(summary, indent=1))
        return
    if settings.offline:
        from calimon.scoring.backends.offline import offline_line

        typer.echo(offline_line(settings.backend, settings.base_url, summary["reused"]))
    limited = (f" (--limit {settings.limit} takes whole pairs, balanced over cells)"
               if settings.limit and summary["samples"] < settings.limit else "")
    typer.echo(f"{summary['samples']} samples{limited}: {summary['scored']} scored, "
               f"{summary['reused']} from the store; model calls {summary['model_calls']}; "
               f"statuses {summary['statuses']}")
    if summary.get("api_usage"):
        typer.echo(usage_line(summary["api_usage"]))
    if export:
        typer.echo(f"wrote {export}")


def register(app: typer.Typer) -> None:
    """Mount ``score`` on the main CLI."""
    app.command("score")(score_cmd)

