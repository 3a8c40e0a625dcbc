"""`calimon serve POLICY.yaml`: the policy's monitor as an HTTP service (docs/serve.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors
from calimon.cli.options import COUNT, SHARE, backend_flags, settings_from

# backend flags that mean nothing to a server: it answers live traffic (no --offline run
# store) from one process's model (no Ray engine: --replicas runs the whole server on Ray)
SERVE_EXCLUDES = ("offline", "engine", "workers")


SERVER, LIMITS, REVIEW, REPLICAS = "Server", "Queue and limits", "Review (--review)", "Replicas"
MONITOR = "Monitor"


@cli_errors
@backend_flags(exclude=SERVE_EXCLUDES)
def serve_cmd(
    ctx: typer.Context,
    policy: Annotated[Path, typer.Argument(help="Policy YAML (from `calimon escalate`): its thresholds and the monitor and map it pins.")],
    host: Annotated[str, typer.Option(help="Address to listen on; not loopback: needs $CALIMON_API_KEY.", rich_help_panel=SERVER)] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", rich_help_panel=SERVER)] = 8000,
    log: Annotated[str, typer.Option(help="Decision log: a SQLite file or a postgresql:// URL.", rich_help_panel=SERVER)] = "runs/serve/decisions.sqlite",
    keys: Annotated[Path | None, typer.Option(help="Key file of 'NAME KEY' lines (docs/review.md).", rich_help_panel=SERVER)] = None,
    calibration_map: Annotated[Path | None, typer.Option("--map", help="Calibration map; must be the one the policy pins (--force: used anyway, recorded).", rich_help_panel=MONITOR)] = None,
    prompt: Annotated[str | None, typer.Option(help="Prompt template; must be the one the policy pins (--force: used anyway).", rich_help_panel=MONITOR)] = None,
    max_input_tokens: Annotated[int | None, typer.Option(help="Prompt tokens read per transcript (default: the design run's, else the model's limit).", rich_help_panel=MONITOR, **COUNT)] = None,
    truncation: Annotated[str | None, typer.Option(help="window[:max|mean[:OVERLAP]] or head_tail, past the input limit (default: pinned).", rich_help_panel=MONITOR)] = None,
    no_access_log: Annotated[bool, typer.Option("--no-access-log", help="No line per request on stderr (uvicorn's).", rich_help_panel=SERVER)] = False,
    shadow: Annotated[Path | None, typer.Option(help="A candidate policy run in shadow (never answers).", rich_help_panel=SERVER)] = None,
    force: Annotated[bool, typer.Option("--force", help="Serve a policy or map made for another monitor anyway (in /v1/info).", rich_help_panel=MONITOR)] = False,
    max_batch: Annotated[int, typer.Option(help="Requests per monitor call (transformers) or in flight.", rich_help_panel=LIMITS)] = 32,
    batch_wait_ms: Annotated[float, typer.Option(help="A batch's wait for more requests (transformers).", rich_help_panel=LIMITS)] = 5.0,
    max_queue: Annotated[int, typer.Option(help="Requests waiting or running; past it, 429.", rich_help_panel=LIMITS)] = 256,
    pass_rows: Annotated[int | None, typer.Option(help="Transcripts per forward pass (default: the batch).", rich_help_panel=LIMITS)] = None,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body (413 over it).", rich_help_panel=LIMITS)] = 1 << 20,
    max_chars: Annotated[int, typer.Option(help="Largest transcript, in characters.", rich_help_panel=LIMITS)] = 200_000,
    max_messages: Annotated[int, typer.Option(help="Most chat messages in one transcript.", rich_help_panel=LIMITS)] = 1000,
    max_sessions: Annotated[int, typer.Option(help="Sessions kept at once (least recent forgotten).", rich_help_panel=LIMITS)] = 1000,
    session_memory_mib: Annotated[float, typer.Option(help="Memory for session caches, MiB.", rich_help_panel=LIMITS)] = 512.0,
    prefix_pool_mib: Annotated[float, typer.Option(help="Ended sessions' caches to reuse, MiB (0: off).", rich_help_panel=LIMITS)] = 256.0,
    review: Annotated[bool, typer.Option("--review", help="Serve the review queue at /review (needs a key; docs/review.md).", rich_help_panel=REVIEW)] = False,
    review_store: Annotated[str, typer.Option(help="A SQLite file or a postgresql:// URL.", rich_help_panel=REVIEW)] = "runs/serve/review.sqlite",
    review_retain: Annotated[float | None, typer.Option(help="Automatic decisions kept to label (default: the audit share, >= 0.2).", rich_help_panel=REVIEW, **SHARE)] = None,
    review_lease: Annotated[float, typer.Option(help="Minutes an item shown stays one reviewer's alone.", rich_help_panel=REVIEW)] = 10.0,
    drift_window: Annotated[int, typer.Option(help="Live transcripts the drift watch compares.", rich_help_panel=REVIEW)] = 500,
    drift_every: Annotated[int, typer.Option(help="Decisions between two drift checks.", rich_help_panel=REVIEW)] = 100,
    drift_permutations: Annotated[int, typer.Option(help="Fewest permutations of a drift check (alpha spending).", rich_help_panel=REVIEW)] = 200,
    replicas: Annotated[int | None, typer.Option(help="N replicas on Ray Serve (--log must be PostgreSQL).", rich_help_panel=REPLICAS)] = None,
    cpus_per_replica: Annotated[float, typer.Option(help="Ray CPUs per replica.", rich_help_panel=REPLICAS)] = 1.0,
    deployment: Annotated[str | None, typer.Option(help="Servers of one log and name: /metrics sums them (--replicas: calimon).", rich_help_panel=REPLICAS)] = None,
):
    """Serve POLICY's monitor (an external one's: its score in each request) over HTTP:
    /v1/score, /v1/sessions/{id}/steps, /metrics, /docs; --review: /review (docs/serve.md)."""
    from calimon.review.settings import ReviewSettings
    from calimon.scoring.engines.settings import BackendSettings
    from calimon.serve import Batching, Limits, ServeSettings
    from calimon.serve.runner import serve

    settings = ServeSettings(
        policy=policy, calibration_map=calibration_map, prompt=prompt,
        max_input_tokens=max_input_tokens, truncation=truncation, force=force,
        backend=settings_from(BackendSettings, ctx.params), log=log, host=host, port=port,
        batching=Batching(max_batch=max_batch, wait_ms=batch_wait_ms, max_queue=max_queue,
                          pass_rows=pass_rows),
        limits=Limits(max_body_bytes=max_body_bytes, max_chars=max_chars,
                      max_messages=max_messages, max_sessions=max_sessions),
        session_memory_mib=session_memory_mib, prefix_pool_mib=prefix_pool_mib, keys_file=keys,
        deployment=deployment, access_log=not no_access_log,
        review=ReviewSettings(store=review_store, retain=review_retain,
                              drift_window=drift_window, drift_every=drift_every,
                              drift_permutations=drift_permutations,
                              lease_minutes=review_lease) if review else None,
        shadow=shadow)
    echo = lambda line: typer.echo(line, err=True)  # noqa: E731
    if replicas is not None:  # --ray-address (a backend flag) names the cluster to join
        if shadow is not None:
            from calimon.errors import InputError

            raise InputError("--shadow runs on one server: the replicas would each hold their "
                             "own live policy, and a promotion would reach one of them",
                             field="shadow")
        from calimon.serve.ray_serve import Replicas, run

        run(settings, Replicas(count=replicas, cpus=cpus_per_replica,
                               address=settings.backend.ray_address), echo=echo)
    else:
        serve(settings, echo=echo)


def register(app: typer.Typer) -> None:
    """Mount ``serve`` on the main CLI."""
    app.command("serve")(serve_cmd)
