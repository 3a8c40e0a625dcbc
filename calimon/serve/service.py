"""What a route asks of the server: score a transcript once (`Service.score`), idempotently by
request id, and build the answer from a reading and the policy.

A request with a ``request_id`` already in the decision log is answered from the log (the same
JSON, byte for byte in its fields), without scoring; one whose id is being scored right now waits
for that answer. An id reused with another body is refused (409). A new answer is logged, and
committed, before it is returned: a server killed after answering has it in its log. A backend
fault is 503 and logs nothing (a retry scores again).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from calimon.samples import Sample, transcript_hash
from calimon.serve.batcher import Batcher, QueueFull
from calimon.serve.decision_log import DecisionLog, LoggedDecision
from calimon.serve.deployment_metrics import SharedMetrics
from calimon.serve.errors import ApiError
from calimon.serve.external import FIELD, check_score
from calimon.serve.kv import HeadCache
from calimon.serve.loading import ServedMonitor
from calimon.serve.log_writer import GroupReader, GroupWriter
from calimon.serve.messages import text_fields, transcript
from calimon.serve.metrics import Metrics
from calimon.serve.policies import Policies
from calimon.serve.prefixes import PrefixPool
from calimon.serve.schemas import ScoreRequest
from calimon.serve.session_log import StepTaken
from calimon.serve.sessions import SessionStore
from calimon.serve.settings import Limits, ServeSettings
from calimon.verdict import Verdict


def body_hash(payload: dict[str, Any]) -> str:
    """sha256 of a request body's canonical JSON (its request id left out, and an external
    score when none was sent, so a body hashes as it did before requests could carry one)."""
    data = {k: v for k, v in payload.items()
            if k != "request_id" and not (k == FIELD and v is None)}
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False)
                          .encode()).hexdigest()


def check_text(fields: list[tuple[str, str]], limits: Limits) -> None:
    """Refuse (422, naming the field) text a monitor cannot read: over ``max_chars``, or with
    lone surrogates (not Unicode text)."""
    for name, text in fields:
        if len(text) > limits.max_chars:
            raise ApiError(422, "too_long", f"{len(text)} characters, over the limit of "
                           f"{limits.max_chars}", name)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(422, "invalid_text", "not valid Unicode text (a lone surrogate)",
                           name) from None


def score_transcript(req: ScoreRequest, limits: Limits) -> tuple[str, str]:
    """``(request, response)`` of a `/v1/score` body, its text checked."""
    if req.messages is not None:
        if req.request is not None or req.response is not None:
            raise ApiError(422, "invalid_request", "give request and response, or messages, "
                           "not both", "messages")
        if not req.messages:
            raise ApiError(422, "invalid_request", "at least one message", "messages")
        check_messages(req.messages, limits)
        request, response = transcript(req.messages)
        field = "messages"
    else:
        for name in ("request", "response"):
            if getattr(req, name) is None:
                raise ApiError(422, "missing", "Field required (or give messages)", name)
        check_text([("request", req.request), ("response", req.response)], limits)
        request, response, field = req.request, req.response, "response"
    check_total(request, response, limits, field)
    check_not_empty(request, response, field)
    return request, response


def check_messages(messages: list, limits: Limits) -> None:
    """Refuse more messages than ``max_messages`` or unreadable text in one of them."""
    if len(messages) > limits.max_messages:
        raise ApiError(422, "too_long", f"{len(messages)} messages, over the limit of "
                       f"{limits.max_messages}", "messages")
    check_text(text_fields(messages), limits)


def check_not_empty(request: str, response: str, field: str) -> None:
    """Refuse (422, naming ``field``) a transcript with no text at all: a monitor would read
    its template alone and decide on nothing (the same transcript as ``messages: []``)."""
    if not request.strip() and not response.strip():
        raise ApiError(422, "empty", "the transcript has no text: request and response are "
                       "empty (or only white space)", field)


def check_total(request: str, response: str, limits: Limits, field: str) -> None:
    """Refuse a transcript over ``max_chars`` in all."""
    total = len(request) + len(response)
    if total > limits.max_chars:
        raise ApiError(422, "too_long", f"the transcript has {total} characters, over the "
                       f"limit of {limits.max_chars}", field)


def evidence(verdict: Verdict, response: str, monitor: Any = None) -> list[dict[str, Any]]:
    """The evidence of a reading (`calimon.serve.schemas.EvidenceSpan`): a token head's top
    segments strongest first (with score, rank and the precision of ``monitor``'s segment
    precision map), then its token-level spans in text order; else the quotes the monitor
    gave."""
    from calimon.scoring.probes.monitor import segment_evidence

    extra = verdict.extra or {}
    segments = [{"text": response[a:b], "start": a, "end": b, "score": s, "precision": p,
                 "rank": k, "unit": "segment"}
                for k, (a, b, s, p) in enumerate(segment_evidence(extra, monitor))]
    spans = [{"text": response[a:b], "start": a, "end": b, "score": s, "unit": "tokens"}
             for a, b, s in extra.get("spans") or ()]
    if segments or spans:
        return segments + spans
    return [{"text": q, "unit": "quote"} for q in verdict.evidence]


def sample_of(request: str, response: str, sid: str | None = None) -> Sample:
    """A `Sample` of served text (no label, no cell: nothing of it reaches a curve)."""
    th = transcript_hash(request, response)
    return Sample(id=sid or th, request=request, response=response, label=None,
                  category="safety", task="reasoning", pair_id=sid or th)


class Service:
    """The server's state: the monitor, the request queue, the sessions, the decision log and
    the metrics. ``observer``: what sees each decision before it is logged (the review queue's,
    when it is on). ``policies``: the live policy, the candidate run in shadow beside it and
    the ones a rollback returns to (`calimon.serve.policies.Policies`)."""

    observer: Callable[..., Awaitable[None]] | None = None

    def __init__(self, served: ServedMonitor, log: DecisionLog, settings: ServeSettings,
                 path: str | None = None):
        self.served, self.log, self.settings = served, log, settings
        self.limits = settings.limits
        self.started = time.monotonic()
        backend = served.backend
        self.sessions: SessionStore | None = None
        self.metrics = Metrics(forward_calls=lambda: getattr(backend, "forward_calls", 0),
                               session_bytes=lambda: self.sessions.cache_bytes()
                               if self.sessions else 0)
        self.sessions = SessionStore(max_sessions=self.limits.max_sessions,
                                     memory_bytes=int(settings.session_memory_mib * 2 ** 20),
                                     metrics=self.metrics)
        if served.gathers:
            backend.max_batch_size = settings.batching.pass_rows or settings.batching.max_batch
        self.batcher = Batcher(served.score, settings.batching, self.metrics,
                               gather=served.gathers)
        self.kv = served.kv_capable and _model_supports_kv(backend)
        self.probe_kv = served.probe_capable and _model_supports_kv(backend)
        self.heads = HeadCache()  # the template head's KV, which every new session starts from
        self.prefixes = PrefixPool(settings.prefix_pool_mib)  # ended sessions' caches
        self._inflight: dict[str, tuple[str, asyncio.Future]] = {}
        self.writer = GroupWriter(log)  # decisions committed in groups, each before its answer
        self.reader = GroupReader(log)  # request ids looked up in groups
        self.groups = [self.writer, self.reader]  # started and stopped with the service
        self.metrics.extra.append(self.writer.groups)
        self.replica = f"{socket.gethostname()}-{os.getpid()}"  # its name in a deployment
        self.shared: SharedMetrics | None = None
        self.policies = Policies(self, str(path or settings.policy))

    async def start(self) -> None:
        """Start the queues' consumers (on the server's event loop) and, in a named deployment,
        the writes of its metrics to the log."""
        await self.batcher.start()
        for group in self.groups:
            await group.start()
        await self.policies.start()
        if self.settings.deployment:
            self.shared = SharedMetrics(self.metrics, self.log, self.settings.deployment,
                                        self.replica)
            await self.shared.start()

    async def stop(self) -> None:
        """Stop the queues and close the log."""
        await self.batcher.stop()
        await self.policies.stop()
        for group in self.groups:
            await group.stop()
        if self.shared is not None:
            await self.shared.stop()
        self.log.close()

    async def render_metrics(self) -> str:
        """``/metrics``: this server's, or in a named deployment the deployment's
        (`calimon.serve.deployment_metrics`)."""
        if self.shared is None:
            return self.metrics.render()
        try:
            return await self.shared.render()
        except Exception as exc:  # noqa: BLE001 - without the log there are no totals
            self.metrics.errors.inc("log")
            raise ApiError(503, "log_unavailable", f"the decision log could not be read "
                           f"({type(exc).__name__}); retry", headers={"Retry-After": "1"}
                           ) from None

    # -- idempotency -----------------------------------------------------------------------
    async def once(self, request_id: str | None, digest: str,
                   produce: Callable[[str], Awaitable[dict]]) -> tuple[dict, bool]:
        """``(answer, replayed)``: the logged answer of ``request_id`` if there is one (or the
        one being produced now), else ``produce(request_id)``'s. Without an id, a fresh one."""
        if request_id is None:
            return await produce(f"srv-{uuid.uuid4().hex}"), False
        try:
            logged = await self.reader.lookup(request_id)
        except Exception as exc:  # noqa: BLE001 - a log that cannot be read answers nothing
            self.metrics.errors.inc("log")
            raise ApiError(503, "log_unavailable", f"the decision log could not be read "
                           f"({type(exc).__name__}); retry", headers={"Retry-After": "1"}
                           ) from None
        if logged is not None:
            return self._replay(request_id, digest, logged.request_sha256, logged.response)
        if request_id in self._inflight:
            other, future = self._inflight[request_id]
            answer = await asyncio.shield(future)
            return self._replay(request_id, digest, other, answer)
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._inflight[request_id] = (digest, future)
        try:
            answer = await produce(request_id)
            future.set_result(answer)
            return answer, False
        except BaseException as exc:
            future.set_exception(exc if isinstance(exc, Exception) else
                                 ApiError(503, "cancelled", "the request was cancelled"))
            raise
        finally:
            self._inflight.pop(request_id, None)

    def _replay(self, request_id: str, digest: str, logged: str, answer: dict
                ) -> tuple[dict, bool]:
        if logged != digest:
            raise ApiError(409, "request_id_reused", f"request id {request_id!r} was used for "
                           "another request", "request_id")
        self.metrics.replays.inc()
        return answer, True

    # -- scoring ---------------------------------------------------------------------------
    async def score(self, req: ScoreRequest, received: float) -> tuple[dict, bool]:
        """Answer a `/v1/score` body (module docstring); ``received``: its arrival
        (``time.perf_counter``)."""
        request, response = score_transcript(req, self.limits)
        served, batcher = self.served, self.batcher  # a promotion meanwhile changes neither
        check_score(served, req.score)
        digest = body_hash(req.model_dump(mode="json"))

        async def produce(rid: str) -> dict:
            sample = sample_of(request, response, req.id)
            verdict = await self.read(served, sample, batcher, req.score)
            audit_id = req.id or sample.transcript_hash
            answer = self.answer(rid, verdict, response, audit_id, received, served)
            shadow = await self.policies.shadow_answer(sample, verdict, audit_id, req.score)
            return await self.commit(LoggedDecision(rid, "score", digest, answer),
                                     (request, response, audit_id, req.messages), shadow)

        return await self.once(req.request_id, digest, produce)

    async def read(self, served: ServedMonitor, sample: Sample, batcher: Batcher | None,
                   score: float | None) -> Verdict:
        """The reading of ``sample`` under ``served``: the score sent with the request, read
        through an external policy's readout (`calimon.serve.external`), or the monitor's
        (`reading`). An external score waits for no model, only for the log: past
        ``--max-queue`` decisions waiting for a commit, 429."""
        if not served.external:
            return await self.reading(sample, batcher)
        if self.writer.waiting() >= self.settings.batching.max_queue:
            self.metrics.rejected.inc()
            raise ApiError(429, "queue_full", "too many decisions waiting for the decision "
                           "log; retry later", headers={"Retry-After": "1"})
        return served.monitor.reading(score, sample.transcript_hash)

    async def reading(self, sample: Sample, batcher: Batcher | None = None) -> Verdict:
        """The monitor's reading through the queue (``batcher``, default the live policy's);
        a full queue is 429, a backend fault 503."""
        try:
            verdict = await (batcher or self.batcher).score(sample)
        except QueueFull as exc:
            raise ApiError(429, "queue_full", "too many requests waiting; retry later",
                           headers={"Retry-After": str(exc.retry_after)}) from None
        except ApiError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported by type only: no transcript text
            self.metrics.errors.inc("backend")
            raise ApiError(503, "backend_error", f"the monitor failed ({type(exc).__name__}); "
                           "retry", headers={"Retry-After": "1"}) from None
        if verdict.status == "error":
            self.metrics.errors.inc("backend")
            raise ApiError(503, "backend_error", "the monitor failed on this transcript; retry",
                           headers={"Retry-After": "1"})
        return verdict

    def answer(self, rid: str, verdict: Verdict, response: str, audit_id: str,
               received: float, served: ServedMonitor | None = None) -> dict[str, Any]:
        """The JSON answer (`calimon.serve.schemas.ScoreResponse`) to a reading of
        ``served``'s monitor (default the live one) under its policy."""
        served = served or self.served
        key = served.monitor.key
        if verdict.truncation:
            self.metrics.truncations.inc()
        return {"request_id": rid, "status": verdict.status,
                **served.decide(verdict, audit_id),
                "evidence": [] if served.external else evidence(verdict, response,
                                                                 served.monitor),
                "truncation": verdict.truncation,
                "tokens": verdict.tokens, "model": key.model,
                "model_revision": key.model_revision, "readout": key.readout,
                "policy": served.policy.name, "policy_hash": served.policy_hash,
                "latency_ms": round((time.perf_counter() - received) * 1000, 3)}

    async def commit(self, entry: LoggedDecision, seen: tuple | None = None,
                     shadow: dict | None = None) -> dict:
        """Log ``entry`` durably and return the answer the log holds under its id. With the
        review queue on (``observer``, set by `calimon.review.api.attach`), ``seen`` (request,
        response, audit id, messages) goes into the review store first. ``shadow``: the
        candidate's decision on the same request, logged as shadow once the live one is (it is
        never answered)."""
        if seen is not None and self.observer is not None:
            await self.observer(self, entry, *seen)
        if shadow is not None:
            entry = self._with_shadow(entry, shadow)
        try:
            stored = await self.writer.record(entry)
        except StepTaken:  # another server logged this step first: the caller follows the log
            raise
        except Exception as exc:  # noqa: BLE001 - nothing unlogged is answered
            self.metrics.errors.inc("log")
            raise ApiError(503, "log_unavailable", f"the decision log could not be written "
                           f"({type(exc).__name__}); retry", headers={"Retry-After": "1"}
                           ) from None
        if stored.request_sha256 != entry.request_sha256:  # another body won the id first
            raise ApiError(409, "request_id_reused", f"request id {entry.request_id!r} was "
                           "used for another request", "request_id")
        self.metrics.decisions.inc(stored.response["decision"])
        if entry.shadow_row is not None:
            self.policies.shadow_decisions.inc(shadow["decision"])
        return stored.response

    def _with_shadow(self, entry: LoggedDecision, shadow: dict) -> LoggedDecision:
        """``entry`` carrying the shadow decision's row, logged in its transaction; a shadow
        decision that cannot be logged is counted and left out, and the live answer stands."""
        from dataclasses import replace

        from calimon.serve.policy_log import shadow_values

        try:
            return replace(entry, shadow_row=shadow_values(entry.request_id, shadow))
        except Exception:  # noqa: BLE001 - the shadow never fails a live answer
            self.metrics.errors.inc("shadow_log")
            return entry


def _model_supports_kv(backend) -> bool:
    from calimon.serve.kv import supports_kv

    return supports_kv(backend.model)
