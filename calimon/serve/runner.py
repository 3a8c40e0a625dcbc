"""Starting a server: check where it listens and take the port, load the monitor, open the
decision log, warm the model, then run uvicorn on the port until it is stopped (`serve`)."""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Callable

from calimon.errors import InputError
from calimon.serve.settings import ServeSettings

BACKLOG = 2048  # uvicorn's default


def startup_lines(service) -> list[str]:
    """What the server says when it starts: the policy, the monitor, the log, the key; never a
    transcript."""
    from calimon.serve.pg_log import redact

    served, s = service.served, service.settings
    lines = [f"policy {served.policy.name!r} (sha256 {served.policy_hash[:12]}), "
             f"{served.policy.score} through {served.map_path or 'no map'}",
             monitor_line(service),
             f"decision log {redact(s.log)} ({log_durability(service.log)}; decisions "
             "committed in groups, each before it is answered)",
             auth_line(service)]
    if getattr(service, "review", None) is not None:
        rv = service.review
        lines.append(f"review queue at /review (store {s.review.store}; transcripts kept: the "
                     f"review band and {rv.retain:.0%} of automatic decisions by audit draw; "
                     f"reviewers: {', '.join(service.auth.keys.names())})")
    lines += policy_lines(service.policies)
    lines += [f"WARNING: applied with --force: {m}" for m in served.forced]
    return lines


def monitor_line(service) -> str:
    """What scores the requests: the monitor the server runs, or an external one's score."""
    from calimon.serve.external import FIELD

    served = service.served
    key = served.monitor.key
    if served.external:
        return (f"monitor external: {key.readout}, its score read from each request's "
                f"{FIELD!r} (no model loaded)")
    return (f"monitor {key.model} (revision {key.model_revision}), prompt {key.prompt}, "
            f"readout {key.readout}; "
            + ("requests gathered into shared forward passes" if served.gathers else
               "requests passed through to the backend")
            + ("; sessions extend a cached KV" if service.kv else
               "; sessions extend the probe's states" if service.probe_kv else ""))


def log_durability(log) -> str:
    """What a commit of the decision log waits for (`durability` of the log), or why that is
    unknown."""
    try:
        return log.durability()
    except Exception as exc:  # noqa: BLE001 - a line of the startup output, never fatal
        return f"durability not read: {type(exc).__name__}"


def policy_lines(pol) -> list[str]:
    """What the server says of the live policy's history and of its shadow."""
    out = []
    made = getattr(pol, "started_by", None)
    if made is not None and made.kind != "deploy":
        out.append(f"live policy from the decision log: {made.policy_name!r} "
                   f"({made.kind} {made.seq}, sha256 {made.policy_hash[:12]}, {made.policy_path})")
    if pol.previous:
        out.append(f"a rollback returns to {pol.previous[-1].name!r} "
                   f"(sha256 {pol.previous[-1].sha256[:12]})")
    if pol.shadow is not None:
        same = "sharing its reading" if pol.shadow.batcher is None else "read on its own queue"
        out.append(f"shadow: policy {pol.shadow.name!r} (sha256 {pol.shadow.sha256[:12]}) "
                   f"scored and logged beside the live one ({same}); it decides nothing")
    if getattr(pol, "note", None):
        out.append(pol.note)
    return out


def auth_line(service) -> str:
    """What the gate enforces (`calimon.serve.security.Gate`): the key file's keys and names,
    or the one key of ``$CALIMON_API_KEY``, or nothing; never a key itself."""
    from calimon.serve.settings import API_KEY_ENV

    auth, s = getattr(service, "auth", None), service.settings
    where = "every route but /healthz"
    if auth is None:
        return (f"API key required on {where} (${API_KEY_ENV}: one key)" if s.key() else
                "API key not set: no authentication (this machine only)")
    n, names = len(auth.keys.entries), auth.keys.names()
    if n == 0:
        return f"API keys required on {where}, and {s.keys_file} holds none: all refused"
    sources = " and ".join(x for x in (str(s.keys_file) if s.keys_file else "",
                                       f"${API_KEY_ENV} (as 'service')" if s.key() else "") if x)
    signin = "; reviewers sign in at /review/login" if auth.sessions is not None else ""
    return (f"API keys required on {where}: {n} key(s) of {len(names)} name(s) from "
            f"{sources}{signin}")


def listen(host: str, port: int) -> list[socket.socket]:
    """Sockets listening on every address of ``host`` at ``port`` (as uvicorn binds them),
    taken before the monitor loads: a port in use stops the server at once, in one line
    (`calimon.errors.InputError`, exit 2). A connection made while the monitor loads waits."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InputError(f"cannot listen on {host!r}: {exc.strerror}", field="host") from None
    out: list[socket.socket] = []
    try:
        for family, kind, proto, _, addr in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
            sock.listen(BACKLOG)
    except OSError as exc:
        for sock in out:
            sock.close()
        busy = exc.errno in (errno.EADDRINUSE, errno.EACCES)
        hint = ": stop what listens there or choose another --port" if busy else ""
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror}{hint}",
                         field="port" if busy else "host") from None
    return out


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
    """The loaded, warmed service ``settings`` describe (no socket opened yet): on the policy
    the decision log says is live (`calimon.serve.policies.start_policy`), with the candidate
    of ``--shadow`` beside it."""
    require_extra()
    settings = isolate_key(settings)
    from calimon.serve.decision_log import open_log
    from calimon.serve.service import Service

    settings.check_exposure()
    log = open_log(settings.log)
    try:
        served, path, start = _live(settings, log)
        served.warm()
        service = Service(served, log, settings, path=path)
        _policies(service, settings, start)
        if settings.review is not None or settings.keys_file is not None:
            from calimon.review.api import attach

            attach(service, settings)
        return service
    except BaseException:
        log.close()
        raise


def _policy_settings(settings: ServeSettings, path: str) -> ServeSettings:
    """``settings`` for another policy file (the map and prompt flags were the given one's)."""
    from dataclasses import replace
    from pathlib import Path

    if Path(path) == Path(settings.policy):
        return settings
    return replace(settings, policy=Path(path), calibration_map=None, prompt=None)


def _live(settings: ServeSettings, log):
    """The live policy loaded, its file, and what the log says of it."""
    from calimon.deploy.policy_file import load_policy
    from calimon.serve.loading import ServedMonitor
    from calimon.serve.policies import start_policy

    path, previous, change = start_policy(log, settings.policy,
                                          load_policy(settings.policy).name)
    served = ServedMonitor.load(_policy_settings(settings, path))
    if change.seq == 0:  # a policy this log has not served: a new deploy
        change = log.record_change(change)
    return served, path, (previous, change)


def _policies(service, settings: ServeSettings, start) -> None:
    """The rollback stack, the loader and the shadow candidate of a new service."""
    from calimon.serve.loading import ServedMonitor
    from calimon.serve.policies import Slot

    previous, change = start
    pol = service.policies
    pol.previous = [Slot(None, None, p.path, p.sha256, p.name) for p in previous]
    pol.loader = lambda path, reuse: ServedMonitor.load(_policy_settings(settings, path), reuse)
    pol.started_by = change
    if settings.shadow is not None:
        from calimon.serve.external import check_pair

        candidate = pol.loader(str(settings.shadow), service.served)
        if candidate.policy_hash == service.served.policy_hash:
            pol.note = f"--shadow {settings.shadow} is the live policy: no shadow"
            return
        check_pair(service.served, candidate, str(settings.shadow))  # before any model loads
        if candidate.monitor is not service.served.monitor:
            candidate.warm()
        pol.set_shadow(candidate, str(settings.shadow))


def serve(settings: ServeSettings, *, echo: Callable[[str], None] = print) -> None:
    """Run `calimon serve` in the foreground until interrupted: the port is taken first, and
    "listening on" is said once uvicorn serves it."""
    require_extra()  # before the imports that need the extra: one line naming it, not a traceback
    import uvicorn

    from calimon.serve.app import create_app

    settings.check_exposure()
    sockets = listen(settings.host, settings.port)
    try:
        service = build_service(settings)
        for line in [*startup_lines(service), http_stack()]:
            echo(f"calimon serve: {line}")
        port = sockets[0].getsockname()[1]
        logging.getLogger("calimon.serve").setLevel(logging.INFO)
        config = uvicorn.Config(create_app(service), host=settings.host, port=port,
                                log_level="info", access_log=settings.access_log, lifespan="on",
                                timeout_graceful_shutdown=5)
        _announcing(uvicorn.Server, lambda: echo(
            f"calimon serve: listening on http://{settings.host}:{port} "
            "(API: /docs; health: /healthz; metrics: /metrics)"))(config).run(sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()


def http_stack() -> str:
    """Which HTTP parser and event loop uvicorn picks ("auto"): httptools and uvloop when
    installed (the serve extra brings them), else h11 and asyncio."""
    from importlib.util import find_spec

    http = "httptools" if find_spec("httptools") else "h11"
    loop = "uvloop" if find_spec("uvloop") else "asyncio"
    slow = "" if (http, loop) == ("httptools", "uvloop") else (
        " (install 'calimon[serve]' for httptools and uvloop, the faster pair)")
    return f"HTTP {http}, event loop {loop}{slow}"


def _announcing(server_class, said: Callable[[], None]):
    """``server_class`` (uvicorn's) calling ``said`` once it has started serving."""

    class Announcing(server_class):
        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            if self.started:
                said()

    return Announcing
