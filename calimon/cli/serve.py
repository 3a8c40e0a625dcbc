"""`calimon serve POLICY.yaml`: the policy's monitor as an HTTP service (docs/serve.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors
from calimon.cli.options import (
    MaxInputTokensOpt,
    backend_flags,
    settings_from,
)


@cli_errors
@backend_flags
def serve_cmd(
    ctx: typer.Context,
    policy: Annotated[Path, typer.Argument(help="Policy YAML (from `calimon escalate`): its model, readout, map and thresholds.")],
    host: Annotated[str, typer.Option(help="Address to listen on; anything but loopback needs $CALIMON_API_KEY.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    log: Annotated[str, typer.Option(help="Decision log: a SQLite file (WAL), created if absent, or a postgresql://USER@HOST/DB URL (the postgres extra).")] = "runs/serve/decisions.sqlite",
    calibration_map: Annotated[Path | None, typer.Option("--map", help="Calibration map (default: the design run's calibration/<method>.json).")] = None,
    prompt: Annotated[str | None, typer.Option(help="Prompt template (default: the one the map or the design run recorded).")] = None,
    max_input_tokens: MaxInputTokensOpt = None,
    truncation: Annotated[str | None, typer.Option(help="How a transcript over the input limit is read: head_tail or window[:max|mean[:OVERLAP]] (calimon curve --truncation); session steps read only the windows they did not read before (default: the design run's policy).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Serve a policy or map made for another monitor anyway (recorded in /v1/info).")] = False,
    max_batch: Annotated[int, typer.Option(help="Requests gathered into one monitor call (transformers backend), or in flight at once (other backends).")] = 32,
    batch_wait_ms: Annotated[float, typer.Option(help="How long a batch waits for more requests after its first (transformers backend).")] = 5.0,
    max_queue: Annotated[int, typer.Option(help="Requests waiting or running; past it, 429 with Retry-After.")] = 256,
    pass_rows: Annotated[int | None, typer.Option(help="Transcripts per forward pass of a gathered call (transformers backend; default: the whole gathered batch, within --batch-tokens).")] = None,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body (413 over it).")] = 1 << 20,
    max_chars: Annotated[int, typer.Option(help="Largest transcript, in characters (a session's whole trajectory).")] = 200_000,
    max_messages: Annotated[int, typer.Option(help="Most chat messages in one transcript.")] = 1000,
    max_sessions: Annotated[int, typer.Option(help="Sessions kept at once (the least recently used is forgotten past it).")] = 1000,
    session_memory_mib: Annotated[float, typer.Option(help="Memory for session caches; past it, the least recently used lose theirs.")] = 512.0,
    keys: Annotated[Path | None, typer.Option(help="API keys with a name each, one 'NAME KEY' (or 'NAME sha256:HEX') per line: clients and reviewers (docs/serve.md, Review).")] = None,
    review: Annotated[bool, typer.Option("--review", help="Serve the review queue at /review: labels, live recertification, drift watch, export (needs --keys or $CALIMON_API_KEY). Keeps the text of the review band and of --review-retain of the automatic decisions.")] = False,
    review_store: Annotated[str, typer.Option(help="Review store (labels, the traffic's rows, the kept transcripts): a SQLite file, or a postgresql://USER@HOST/DB URL (the postgres extra).")] = "runs/serve/review.sqlite",
    review_retain: Annotated[float | None, typer.Option(help="Share of automatic decisions whose transcript is kept for labelling, by audit draw (default: the policy's audit fraction, at least 0.2).")] = None,
    review_lease: Annotated[float, typer.Option(help="Minutes an item shown to a reviewer is theirs alone: the other reviewers' queues skip it (renewed while their page is worked on; a label releases it).")] = 10.0,
    drift_window: Annotated[int, typer.Option(help="Kept live transcripts the drift watch compares with the calibration run.")] = 500,
    drift_every: Annotated[int, typer.Option(help="Decisions between two drift checks.")] = 100,
    drift_permutations: Annotated[int, typer.Option(help="Permutations of the drift check's two-sample test.")] = 200,
    replicas: Annotated[int | None, typer.Option(help="Run N replicas as a Ray Serve deployment behind its proxy (the ray extra; --log must be PostgreSQL).")] = None,
    cpus_per_replica: Annotated[float, typer.Option(help="Ray CPUs each replica reserves (with --replicas).")] = 1.0,
):
    """Serve POLICY's monitor over HTTP: /v1/score, /v1/sessions/{id}/steps, /healthz, /metrics; with --review, the review queue at /review."""
    from calimon.scoring.engines.settings import BackendSettings
    from calimon.serve import Batching, Limits, ServeSettings
    from calimon.serve.review_settings import ReviewSettings
    from calimon.serve.runner import serve

    settings = ServeSettings(
        policy=policy, calibration_map=calibration_map, prompt=prompt,
        max_input_tokens=max_input_tokens, truncation=truncation, force=force,
        backend=settings_from(BackendSettings, ctx.params), log=log, host=host, port=port,
        batching=Batching(max_batch=max_batch, wait_ms=batch_wait_ms, max_queue=max_queue,
                          pass_rows=pass_rows),
        limits=Limits(max_body_bytes=max_body_bytes, max_chars=max_chars,
                      max_messages=max_messages, max_sessions=max_sessions),
        session_memory_mib=session_memory_mib, keys_file=keys,
        review=ReviewSettings(store=review_store, retain=review_retain,
                              drift_window=drift_window, drift_every=drift_every,
                              drift_permutations=drift_permutations,
                              lease_minutes=review_lease) if review else None)
    echo = lambda line: typer.echo(line, err=True)  # noqa: E731
    if replicas is not None:  # --ray-address (a backend flag) names the cluster to join
        from calimon.serve.ray_serve import Replicas, run

        run(settings, Replicas(count=replicas, cpus=cpus_per_replica,
                               address=settings.backend.ray_address), echo=echo)
    else:
        serve(settings, echo=echo)


def register(app: typer.Typer) -> None:
    """Mount ``serve`` on the main CLI."""
    app.command("serve")(serve_cmd)
