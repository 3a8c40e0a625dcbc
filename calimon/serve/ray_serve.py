"""`calimon serve POLICY --replicas N`: the same FastAPI app (`calimon.serve.app.create_app`) as a
Ray Serve deployment of N replicas behind Ray Serve's HTTP proxy, all writing one PostgreSQL
decision log (docs/serve.md, "Scale-out on Ray Serve").

Each replica is a Ray actor that builds what a single `calimon serve` builds (`replica_app`: the
monitor loaded and warmed, the log opened, the app with its lifespan, its queue and its
sessions) and answers the requests the proxy routes to it; every answer carries the header
``Calimon-Replica`` (the Ray Serve replica id). The log is what makes replicas one service: an id
answered by any replica is answered from the log by every other (`calimon.serve.pg_log`), and
two replicas scoring one id at once answer with the decision logged first. So a SQLite file,
which replicas on several machines cannot share, is refused.

Sessions: a step sent with the session header (`session_header`) is routed by Ray Serve's
consistent-hash router to the replica that holds its session's cache (`session_routing`); any
other replica that gets a step (no header, a replica died or was added) rebuilds the session
from the log's steps and answers it (`calimon.serve.steps`). `/metrics`: each replica writes
its metrics to the log, and a scrape of any replica gives the deployment's totals and every
replica's series (`calimon.serve.deployment_metrics`). What stays per replica: the queue and
its gathering, and the session caches.

A replica that dies (killed, out of memory, its node lost) is restarted by Ray Serve; the
requests it was running fail (the proxy answers 500, or the connection drops) and nothing they
had not committed was answered, so a client retries them with their ids: those the dead replica
had logged are answered from the log, the rest are scored. The driver (`run`) starts a local Ray
cluster, or joins one (``--ray-address``), starts Serve's proxy on ``host:port`` and waits until
SIGINT or SIGTERM, then shuts the application down (and the local cluster).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path

from calimon.errors import InputError, MissingExtraError
from calimon.serve.pg_log import is_postgres_url, redact
from calimon.serve.settings import ServeSettings

APP_NAME = "calimon"
DEPLOYMENT = "calimon-serve"
REPLICA_HEADER = "Calimon-Replica"
ENV_PASSED = ("CALIMON_HOME", "CALIMON_MODELS_DIR", "CALIMON_SOURCES", "HF_HOME",
              "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
INSTALL = "pip install 'calimon[ray,serve,postgres]'"
GRACEFUL_S = 10  # a replica stopped (shutdown, downscale) finishes its requests within this


@dataclass(frozen=True, kw_only=True)
class Replicas:
    """How the deployment runs: ``count`` replicas, each reserving ``cpus`` of Ray's CPUs (its
    torch threads: ``--threads``, else Ray's default of one per reserved CPU); ``address``: the
    Ray cluster to join (None: start a local one for this process)."""

    count: int
    cpus: float = 1.0
    address: str | None = None

    def __post_init__(self):
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise InputError(f"expected a whole number >= 1, got {self.count!r}",
                             field="replicas")
        if not 0 < self.cpus <= 1024:
            raise InputError(f"expected a number of CPUs > 0, got {self.cpus!r}",
                             field="cpus_per_replica")


def import_serve():
    """``(ray, ray.serve)``; `MissingExtraError` with the install line when absent."""
    try:
        import ray
        from ray import serve
    except ImportError as exc:
        raise MissingExtraError(f"calimon serve --replicas needs Ray Serve ({exc.name} is "
                                f"missing): {INSTALL}") from None
    return ray, serve


def check(settings: ServeSettings) -> None:
    """Refuse what replicas cannot share or expose: a decision log that is not PostgreSQL, a
    non-loopback address without an API key."""
    if not is_postgres_url(settings.log):
        raise InputError("replicas share one decision log, which must be PostgreSQL "
                         "(--log postgresql://USER@HOST/DB): a SQLite file is one machine's, "
                         f"got {settings.log!r}", field="log")
    settings.check_exposure()


def shipped(settings: ServeSettings) -> ServeSettings:
    """``settings`` as replicas get them: every path absolute (a replica does not run in this
    folder), the API key resolved here (a replica's environment may not hold it), and a
    deployment name (default `APP_NAME`) under which their metrics are summed."""
    paths = {f.name: value.resolve() for f in fields(settings)
             if isinstance(value := getattr(settings, f.name), Path)}
    return replace(settings, **paths, api_key=settings.key() or "",
                   deployment=settings.deployment or APP_NAME)


class _Tagged:
    """ASGI middleware: every HTTP answer names the replica that gave it."""

    def __init__(self, app, replica: str):
        self.app, self.value = app, replica.encode("ascii", "replace")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def tagged(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  (REPLICA_HEADER.lower().encode(),
                                                   self.value)]}
            await send(message)

        await self.app(scope, receive, tagged)


def replica_name() -> str:
    """This replica's Ray Serve id (``pid-N`` outside a replica)."""
    try:
        from ray import serve

        context = serve.get_replica_context()
    except Exception:  # noqa: BLE001 - not in a replica (or an older Ray): the pid names it
        return f"pid-{os.getpid()}"
    rid = getattr(context, "replica_id", None)
    return str(getattr(rid, "unique_id", None) or getattr(context, "replica_tag", None)
               or f"pid-{os.getpid()}")


def replica_app(settings: ServeSettings, workdir: str):
    """On a replica: the app a single `calimon serve` would run (monitor loaded and warmed,
    log opened), tagged with the replica's id. Relative paths in the policy's provenance are
    read from ``workdir``, the driver's folder, when it exists here."""
    from calimon.serve.app import create_app
    from calimon.serve.runner import build_service

    if os.path.isdir(workdir):
        os.chdir(workdir)
    service = build_service(settings)
    service.replica = replica_name()
    # Ray prefixes a replica's output with its pid in the driver's: which process is which
    print(f"calimon serve: replica {service.replica} is up", file=sys.stderr, flush=True)
    return _Tagged(create_app(service), service.replica)


def deployment(settings: ServeSettings, replicas: Replicas):
    """The bound Ray Serve application: ``replicas.count`` replicas of `replica_app`."""
    _, serve = import_serve()
    ready, workdir = shipped(settings), os.getcwd()

    def build():  # a function: Ray Serve calls it on each replica (serve.ingress)
        return replica_app(ready, workdir)

    ingress = serve.ingress(build)()
    return serve.deployment(
        ingress, name=DEPLOYMENT, num_replicas=replicas.count,
        ray_actor_options={"num_cpus": replicas.cpus},
        # the replica's own queue answers 429 past max_queue: let that many through to it
        max_ongoing_requests=settings.batching.max_queue,
        graceful_shutdown_timeout_s=GRACEFUL_S,
        logging_config={"enable_access_log": settings.access_log},
        **session_routing(),
    ).bind()


def session_routing() -> dict:
    """The deployment option that sends the requests of one session to one replica: Ray
    Serve's consistent-hash router over the session header (`SESSION_HEADER`, Ray 2.60's
    ``ray.serve.experimental``), whose ring is rebuilt when a replica dies or is added; {}
    (Ray's default router) on a Ray without it. Either way a step that reaches another
    replica is answered there, its session rebuilt from the decision log."""
    try:
        from ray.serve.config import RequestRouterConfig
        from ray.serve.experimental.consistent_hash_router import ConsistentHashRouter
    except ImportError:
        return {}
    name = f"{ConsistentHashRouter.__module__}.{ConsistentHashRouter.__qualname__}"
    return {"request_router_config": RequestRouterConfig(request_router_class=name)}


def session_header() -> str | None:
    """The header whose value Ray Serve's router hashes (Ray's ``x-session-id``, renamed by
    ``RAY_SERVE_SESSION_ID_HEADER_KEY``); None: no session routing on this Ray."""
    if not session_routing():
        return None
    return os.environ.get("RAY_SERVE_SESSION_ID_HEADER_KEY", "x-session-id")


def runtime_env() -> dict:
    """The environment variables replicas need from this process (model and data folders,
    offline flags)."""
    return {"env_vars": {n: os.environ[n] for n in ENV_PASSED if n in os.environ}}


def start(settings: ServeSettings, replicas: Replicas, *,
          echo: Callable[[str], None] = print) -> bool:
    """Join or start the Ray cluster, start Serve's proxy on ``settings.host:port`` and deploy
    the replicas; returns once every replica is up (True: this call started the cluster)."""
    check(settings)
    ray, serve = import_serve()
    started = not ray.is_initialized()
    if started:
        ray.init(address=replicas.address, include_dashboard=False, configure_logging=False,
                 runtime_env=runtime_env())
    try:
        serve.start(http_options={"host": settings.host, "port": settings.port},
                    logging_config={"enable_access_log": settings.access_log})  # the proxy's
        echo(f"calimon serve: starting {replicas.count} replica(s) of policy "
             f"{str(settings.policy)!r} on Ray Serve, {replicas.cpus:g} CPU each; decision log "
             f"{redact(settings.log)}; API key "
             f"{'required' if settings.key() or settings.keys_file else 'not set'}")
        serve.run(deployment(settings, replicas), name=APP_NAME, route_prefix="/")
    except BaseException:
        stop(started)
        raise
    return started


def stop(started_cluster: bool) -> None:
    """Delete the application and stop Serve; stop the cluster if this process started it."""
    ray, serve = import_serve()
    try:
        serve.shutdown()
    finally:
        if started_cluster:
            ray.shutdown()


def run(settings: ServeSettings, replicas: Replicas, *,
        echo: Callable[[str], None] = print) -> None:
    """`calimon serve --replicas N` in the foreground: `start`, then wait for SIGINT or
    SIGTERM and `stop`."""
    done = threading.Event()

    def on_signal(*_):
        done.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    started = start(settings, replicas, echo=echo)
    for sig in (signal.SIGINT, signal.SIGTERM):  # again: starting Ray may have set its own
        signal.signal(sig, on_signal)
    header = session_header()
    echo(f"calimon serve: listening on http://{settings.host}:{settings.port} through Ray "
         f"Serve's proxy ({replicas.count} replica(s); each answer names its replica in "
         f"{REPLICA_HEADER}; "
         + (f"a session's steps sent with header {header} go to one replica; " if header
            else "") + "API: /docs; health: /healthz)")
    try:
        while not done.wait(1.0):
            pass
    finally:
        echo("calimon serve: stopping the replicas")
        stop(started)
