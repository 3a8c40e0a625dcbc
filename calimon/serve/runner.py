"""Starting a server: check where it listens, load the monitor, open the decision log, warm the
model, then run uvicorn until it is stopped (`serve`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from calimon.serve.settings import ServeSettings


def startup_lines(service) -> list[str]:
    """What the server says when it starts: the policy, the monitor, the log, the key; never a
    transcript."""
    from calimon.serve.pg_log import redact

    served, s = service.served, service.settings
    key = served.monitor.key
    lines = [f"policy {served.policy.name!r} (sha256 {served.policy_hash[:12]}), "
             f"{served.policy.score} through {served.map_path or 'no map'}",
             f"monitor {key.model} (revision {key.model_revision}), prompt {key.prompt}, "
             f"readout {key.readout}; "
             + ("requests gathered into shared forward passes" if served.gathers else
                "requests passed through to the backend")
             + ("; sessions extend a cached KV" if service.kv else ""),
             f"decision log {redact(s.log)}",
             f"API key {'required' if s.key() else 'not set (this machine only)'}"]
    if getattr(service, "review", None) is not None:
        rv = service.review
        lines.append(f"review queue at /review (store {s.review.store}; transcripts kept: the "
                     f"review band and {rv.retain:.0%} of automatic decisions by audit draw; "
                     f"reviewers: {', '.join(service.auth.keys.names())})")
    lines += [f"WARNING: applied with --force: {m}" for m in served.forced]
    return lines


def require_extra() -> None:
    """Fail with the install line when FastAPI or uvicorn is missing."""
    from calimon.errors import MissingExtraError

    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(f"calimon serve needs FastAPI and uvicorn ({exc.name} is "
                                "missing): pip install 'calimon[serve]'") from None


def isolate_key(settings: ServeSettings) -> ServeSettings:
    """``settings`` holding the service's key, read once, with ``$CALIMON_API_KEY`` then taken
    out of this process's environment: the http and chat backends send that variable to their
    model server (docs/backends.md), which must never receive the service's own key."""
    import os
    from dataclasses import replace

    from calimon.serve.settings import API_KEY_ENV

    kept = replace(settings, api_key=settings.key() or "")
    os.environ.pop(API_KEY_ENV, None)
    return kept


def build_service(settings: ServeSettings):
    """The loaded, warmed service ``settings`` describe (no socket opened yet)."""
    require_extra()
    settings = isolate_key(settings)
    from calimon.serve.decision_log import open_log
    from calimon.serve.loading import ServedMonitor
    from calimon.serve.service import Service

    settings.check_exposure()
    served = ServedMonitor.load(settings)
    log = open_log(settings.log)
    try:
        served.warm()
        service = Service(served, log, settings)
        if settings.review is not None or settings.keys_file is not None:
            from calimon.serve.review_api import attach

            attach(service, settings)
        return service
    except BaseException:
        log.close()
        raise


def serve(settings: ServeSettings, *, echo: Callable[[str], None] = print) -> None:
    """Run `calimon serve` in the foreground until interrupted."""
    import uvicorn

    from calimon.serve.app import create_app

    service = build_service(settings)
    for line in startup_lines(service):
        echo(f"calimon serve: {line}")
    echo(f"calimon serve: listening on http://{settings.host}:{settings.port} "
         "(API: /docs; health: /healthz; metrics: /metrics)")
    logging.getLogger("calimon.serve").setLevel(logging.INFO)
    config = uvicorn.Config(create_app(service), host=settings.host, port=settings.port,
                            log_level="info", access_log=True, lifespan="on",
                            timeout_graceful_shutdown=5)
    uvicorn.Server(config).run()
