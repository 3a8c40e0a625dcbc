"""The FastAPI app of `calimon serve` (`create_app`): the routes, the gate (API key, body size),
the error bodies and the request metrics. The routes and their models are on the OpenAPI page,
``/docs`` (``/openapi.json``; its assets served here, `calimon.serve.api_docs`), behind the
API key like every route but ``/healthz``.

Nothing here logs a request body: uvicorn's access log has the method, path and status only.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Path, Response
from fastapi.openapi.utils import get_openapi
from fastapi.responses import PlainTextResponse

from calimon import __version__
from calimon.scoring.windows import truncation_record
from calimon.serve import api_docs, errors, steps
from calimon.serve.metrics import CONTENT_TYPE
from calimon.serve.schemas import (
    ErrorResponse,
    Health,
    Info,
    ScoreRequest,
    ScoreResponse,
    StepRequest,
    StepResponse,
)
from calimon.serve.security import Gate
from calimon.serve.service import Service

SessionId = Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@+=-]+$",
                 description="The caller's name for the trajectory.")
ERRORS = {code: {"model": ErrorResponse} for code in (400, 401, 409, 413, 422, 429, 503)}
REPLAY_HEADER = "Idempotent-Replayed"


def route_of(path: str) -> str:
    """A path as its route template (the label of the request metrics)."""
    if path.startswith("/v1/sessions/"):
        return "/v1/sessions/{id}/steps" if path.endswith("/steps") else "/v1/sessions/{id}"
    known = ("/v1/score", "/v1/info", "/healthz", "/metrics", "/docs", "/openapi.json",
             "/v1/policy", "/v1/policy/promote", "/v1/policy/rollback")
    if path.startswith(api_docs.STATIC_URL + "/"):
        return api_docs.STATIC_URL
    if path.startswith(("/review", "/v1/review")):
        from calimon.review.api import route_of as review_route

        return review_route(path)
    return path if path in known else "other"


class _Measured:
    """ASGI middleware: counts every answer by route and status and times it (arrival to the
    answer's start), before the answer goes out. In a named deployment it sends the answer
    only once the count is in the shared log (`calimon.serve.deployment_metrics`), so the
    deployment's totals hold every answer sent, a server killed right after included."""

    def __init__(self, app, service: Service):
        self.app, self.service, self.metrics = app, service, service.metrics

    def _count(self, route: str, status: int, start: float) -> None:
        self.metrics.requests.inc(route, str(status))
        self.metrics.latency.observe(time.perf_counter() - start, route)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, route, counted = time.perf_counter(), route_of(scope.get("path", "")), [False]

        async def tell(message):
            if message["type"] == "http.response.start":
                self._count(route, message["status"], start)
                counted[0] = True
                shared = self.service.shared
                if shared is not None:
                    await shared.durable()
            await send(message)

        try:
            await self.app(scope, receive, tell)
        finally:
            if not counted[0]:  # no answer started: the server's own 500, or a client gone
                self._count(route, 500, start)


def create_app(service: Service) -> FastAPI:
    """The app serving ``service`` (module docstring)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await service.start()
        try:
            yield
        finally:
            await service.stop()
            if getattr(service, "review", None) is not None:
                service.review.store.close()

    app = FastAPI(title="calimon serve", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="Calibrated monitor decisions under a certified escalation policy "
                              "(docs/serve.md). Every route but /healthz needs "
                              "'Authorization: Bearer KEY' when the server has a key.")
    errors.install(app)
    _routes(app, service)
    api_docs.install(app)
    if getattr(service, "review", None) is not None:
        from calimon.review.api import install

        install(app, service)  # the review queue, live recertification, drift, export
    app.openapi = lambda: _openapi(app)
    # the last added runs first: every answer is measured, the gate's refusals included
    app.add_middleware(Gate, key=service.settings.key(),
                       max_body_bytes=service.limits.max_body_bytes,
                       auth=getattr(service, "auth", None))
    app.add_middleware(_Measured, service=service)
    return app


def _routes(app: FastAPI, service: Service) -> None:
    @app.post("/v1/score", response_model=ScoreResponse, responses=ERRORS)
    async def score(body: ScoreRequest, response: Response) -> dict:
        """Score one transcript (request and response text, or chat messages) and decide under
        the policy. A retried ``request_id`` is answered from the decision log."""
        answer, replayed = await service.score(body, time.perf_counter())
        if replayed:
            response.headers[REPLAY_HEADER] = "true"
        return answer

    @app.post("/v1/sessions/{session_id}/steps", response_model=StepResponse,
              responses=ERRORS)
    async def session_step(body: StepRequest, response: Response,
                           session_id: str = SessionId) -> dict:
        """Append a step's messages to a session's trajectory and decide on the trajectory so
        far (a tool call can be checked before it runs); a step costs its new tokens."""
        answer, replayed = await steps.step(service, session_id, body, time.perf_counter())
        if replayed:
            response.headers[REPLAY_HEADER] = "true"
        return answer

    @app.delete("/v1/sessions/{session_id}", responses=ERRORS)
    async def end_session(session_id: str = SessionId) -> dict:
        """Forget a session: its cache here and its steps' messages in the decision log (its
        decisions stay), so that no server continues it; its id may begin anew at step 0."""
        return {"session_id": session_id, "deleted": await steps.end(service, session_id)}

    @app.get("/healthz", response_model=Health)
    async def healthz() -> dict:
        """The server answers and its monitor is loaded (no API key needed)."""
        return {"status": "ok", "uptime_s": round(time.monotonic() - service.started, 3)}

    @app.get("/metrics", response_class=PlainTextResponse, responses=ERRORS)
    async def metrics() -> PlainTextResponse:
        """Prometheus text: requests, decisions, latency, queue depth, batches, forward calls,
        truncations, errors, session caches; in a named deployment, its totals and each
        replica's series."""
        return PlainTextResponse(await service.render_metrics(), media_type=CONTENT_TYPE)

    @app.get("/v1/info", response_model=Info, responses=ERRORS)
    async def info() -> dict:
        """The policy, the monitor and the limits this server applies."""
        return _info(service)


def _finite(x: float) -> float | None:
    return x if abs(x) != float("inf") else None


def _head_tokens(served) -> int | None:
    encoder = getattr(served.monitor, "encoder", None) if served.gathers else None
    return getattr(encoder, "prefix_len", None)


def _info(service: Service) -> dict:
    served, p = service.served, service.served.policy
    key = served.monitor.key
    b = service.settings.batching
    rows = getattr(served.backend, "max_batch_size", None)
    mode = (f"gathered: up to {b.max_batch} per monitor call within {b.wait_ms:g} ms, "
            f"{rows} per forward pass" if served.gathers
            else f"external score: no model; up to {b.max_queue} decisions waiting for the "
                 "log's group commit" if served.external
            else f"passed through: up to {b.max_batch} in flight")
    lim = service.limits
    return {"policy": p.name, "policy_hash": served.policy_hash, "model": key.model,
            "model_revision": key.model_revision, "readout": key.readout, "prompt": key.prompt,
            "template_hash": key.template_hash, "head_tokens": _head_tokens(served),
            "truncation": truncation_record(served.monitor),
            "calibration": p.calibration,
            "calibration_map": served.map_path, "t_low": _finite(p.t_low),
            "t_high": _finite(p.t_high), "batching": mode,
            "limits": {"max_body_bytes": lim.max_body_bytes, "max_chars": lim.max_chars,
                       "max_messages": lim.max_messages, "max_sessions": lim.max_sessions,
                       "max_queue": b.max_queue},
            "forced": served.forced}


def _openapi(app: FastAPI) -> dict:
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version,
                             description=app.description, routes=app.routes)
        schema.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"}}
        schema["security"] = [{"bearer": []}]
        app.openapi_schema = schema
    return app.openapi_schema
