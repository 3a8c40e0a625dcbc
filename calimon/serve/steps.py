"""`POST /v1/sessions/{id}/steps`: a trajectory scored as its steps arrive.

A step appends its messages to the session's trajectory and scores the whole trajectory so far,
with a decision, so a caller can check a tool call before it runs. On the transformers backend
with a verdict or json readout, the session's cache (`calimon.serve.kv`) makes a step cost its new
tokens and the question after them; with a probe head or bundle, its new tokens up to the
probe's layer (`calimon.serve.probe_steps`); the reading equals the whole trajectory's
(`/v1/score`) up to float rounding. Otherwise, or when the prompt is over the model's input limit
(it is cut head_tail and the cut recorded), the whole prompt is scored (``kv.mode`` ``full``).
For an externally scored policy each step carries the score of the trajectory so far
(`calimon.serve.external`); its messages are kept as any step's are (``kv.mode`` ``full``,
no tokens).

Steps of one session run one at a time, in arrival order; the ``step`` field, when sent, must
be the session's next index (409 otherwise). The decision log keeps every step's messages with
its decision (`calimon.serve.session_log`), and is the session's truth: before a step, the
server appends the steps the log holds past its own copy (another server, or a replica, took
them), and a session it does not hold is rebuilt from the log (its cache computed afresh on the
next step, which scores as before). A session the log does not hold accepts only step 0. The log
takes a step index once: of two servers scoring step k of one session at once, the second's
commit is refused (`StepTaken`), so it follows the log and answers 409 ``step_mismatch`` to a
step that named its index, or scores the step as the next one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from calimon.defenses import with_defense_record
from calimon.numerics.readouts import answer_token_ids, read_distribution
from calimon.samples import Sample
from calimon.serve.decision_log import LoggedDecision
from calimon.serve.errors import ApiError
from calimon.serve.external import check_score
from calimon.serve.kv import extend, full_use
from calimon.serve.messages import transcript
from calimon.serve.probe_steps import probe_step
from calimon.serve.schemas import Message, StepRequest
from calimon.serve.service import (
    Service,
    body_hash,
    check_messages,
    check_not_empty,
    check_total,
    sample_of,
)
from calimon.serve.session_log import StepTaken, step_body
from calimon.serve.sessions import Session
from calimon.verdict import Verdict

RACES = 3  # a step whose index another server took is scored again at most this many times


async def follow_log(service: Service, session: Session) -> None:
    """Bring ``session`` (its lock held) up to the decision log: append the steps logged past
    its own copy (another server took them), or rebuild it from step 0 when this server does
    not hold it or its copy is not the log's (its last step is not logged under the same
    request id: the session was deleted, and perhaps begun anew). A copy that only grows keeps
    its cache."""
    since = max(session.steps - 1, 0)
    logged = await _read_steps(service, session.id, since)
    if session.steps:
        if logged and logged[0].step == since and logged[0].request_id == session.last_id:
            logged = logged[1:]
        else:
            session.request, session.messages, session.steps, session.kv = None, [], 0, None
            logged = await _read_steps(service, session.id, 0)
    if logged and logged[0].step == session.steps == 0:
        service.metrics.rebuilds.inc()
    for row in logged:
        if row.step != session.steps:  # a gap: what follows is not this trajectory's
            break
        if row.step == 0:
            session.request = row.request
        session.messages = [*session.messages,
                            *(Message.model_validate(m) for m in row.messages)]
        session.steps, session.last_id = session.steps + 1, row.request_id


async def _read_steps(service: Service, session_id: str, since: int) -> list:
    try:
        return await asyncio.to_thread(service.log.steps, session_id, since)
    except Exception as exc:  # noqa: BLE001 - a log that cannot be read answers nothing
        service.metrics.errors.inc("log")
        raise ApiError(503, "log_unavailable", f"the decision log could not be read "
                       f"({type(exc).__name__}); retry", headers={"Retry-After": "1"}) from None


async def step(service: Service, session_id: str, req: StepRequest, received: float
               ) -> tuple[dict, bool]:
    """Answer one step (module docstring): ``(answer, replayed)``."""
    check_score(service.served, req.score)
    digest = body_hash({"session_id": session_id, **req.model_dump(mode="json")})

    async def produce(rid: str) -> dict:
        for _ in range(RACES):
            session = service.sessions.open(session_id)
            async with session.lock:
                await follow_log(service, session)
                if session.steps == 0 and req.step not in (None, 0):
                    service.sessions.drop(session_id)
                    raise ApiError(409, "unknown_session", f"session {session_id!r} has no step "
                                   "in the decision log: begin it with step 0", "step")
                try:
                    return await _locked_step(service, session, req, rid, digest, received)
                except StepTaken:  # another server took this index: follow the log, again
                    continue
        raise ApiError(409, "step_mismatch", f"session {session_id!r} moved on {RACES} times "
                       "while this step was scored; send it again", "step")

    return await service.once(req.request_id, digest, produce)


async def end(service: Service, session_id: str) -> bool:
    """Forget a session here and its logged steps (`DELETE /v1/sessions/{id}`); whether there
    was anything to forget."""
    ended = service.sessions.get(session_id)
    held = service.sessions.drop(session_id)
    if ended is not None:
        service.prefixes.keep(session_id, ended.kv)
    try:
        logged = await asyncio.to_thread(service.log.forget, session_id)
    except Exception as exc:  # noqa: BLE001 - the session may still be continued elsewhere
        service.metrics.errors.inc("log")
        raise ApiError(503, "log_unavailable", f"the decision log could not be written "
                       f"({type(exc).__name__}); retry", headers={"Retry-After": "1"}) from None
    return held or logged > 0


async def _locked_step(service: Service, session: Session, req: StepRequest, rid: str,
                       digest: str, received: float) -> dict:
    if req.step is not None and req.step != session.steps:
        raise ApiError(409, "step_mismatch", f"session {session.id!r} has {session.steps} "
                       f"step(s): the next one is step {session.steps}, not {req.step}", "step")
    if req.request is not None and session.steps > 0:
        raise ApiError(422, "invalid_request", "the task text goes with step 0 only", "request")
    messages = [*session.messages, *req.messages]
    check_messages(messages, service.limits)
    task = req.request if session.steps == 0 else session.request
    request, response = transcript(messages, task)
    check_total(request, response, service.limits, "messages")
    check_not_empty(request, response, "messages")
    sample = sample_of(request, response)
    served = service.served
    if served.external:  # the score of the trajectory so far came with the step
        verdict = await service.read(served, sample, None, req.score)
        kv = full_use(service, 0)
    else:
        verdict, kv = await _reading(service, session, sample)
    index = session.steps
    audit_id = f"{session.id}#{index}"
    answer = service.answer(rid, verdict, response, audit_id, received, served)
    answer.update(session_id=session.id, step=index, kv=kv)
    shadow = await service.policies.shadow_answer(sample, verdict, audit_id, req.score)
    body = step_body(req.request, [m.model_dump(mode="json", exclude_unset=True)
                                   for m in req.messages])
    logged = await service.commit(LoggedDecision(rid, "step", digest, answer,
                                                 session_id=session.id, step=index, body=body),
                                  (request, response, audit_id, messages), shadow)
    session.messages, session.request, session.steps = messages, task, index + 1
    session.last_id = logged["request_id"]
    return logged


async def _reading(service: Service, session: Session, sample: Sample
                   ) -> tuple[Verdict, dict[str, Any]]:
    if service.probe_kv:
        call = lambda: probe_step(service, session, sample)  # noqa: E731
    elif service.kv:
        call = lambda: kv_step(service, session, sample)  # noqa: E731
    else:
        verdict = await service.reading(sample)
        return verdict, full_use(service, verdict.tokens)

    try:
        verdict, kv = await service.batcher.run_alone(call)
    except ApiError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported by type only: no transcript text
        from calimon.serve.batcher import QueueFull

        if isinstance(exc, QueueFull):
            raise ApiError(429, "queue_full", "too many requests waiting; retry later",
                           headers={"Retry-After": str(exc.retry_after)}) from None
        service.metrics.errors.inc("step")
        raise ApiError(503, "backend_error", f"the monitor failed ({type(exc).__name__}); "
                       "retry", headers={"Retry-After": "1"}) from None
    if verdict.status == "error":
        service.metrics.errors.inc("backend")
        raise ApiError(503, "backend_error", "the monitor failed on this transcript; retry",
                       headers={"Retry-After": "1"})
    return verdict, kv


def kv_step(service: Service, session: Session, sample: Sample) -> tuple[Verdict, dict]:
    """On the model thread: the reading of ``sample`` from the session's cache, extended
    (`calimon.serve.kv.extend`); a prompt cut to the input limit is scored whole instead."""
    monitor = service.served.monitor
    enc = monitor.encoder.encode(sample.request, sample.response)
    if enc.truncation is not None:
        verdict = service.served.score([sample])[0]
        return verdict, full_use(service, verdict.tokens)
    start = time.perf_counter()
    held = session.kv or service.prefixes.seed(enc.ids, enc.prefix_len,
                                               service.sessions.caches(but=session)) \
        or service.heads.seed(monitor.backend, enc.ids[:enc.prefix_len])
    logprobs, state, reused = extend(monitor.backend, held, enc.ids, enc.response_end)
    service.sessions.keep_kv(session, state)
    computed = len(enc.ids) - reused
    service.metrics.kv_tokens.inc("reused", by=reused)
    service.metrics.kv_tokens.inc("computed", by=computed)
    pos, neg = answer_token_ids(monitor.backend.tokenizer, monitor.readout)
    p_raw, p_yes, p_no, mass = read_distribution(logprobs, pos, neg)
    verdict = Verdict(transcript_hash=sample.transcript_hash, readout=monitor.readout,
                      status="ok" if p_raw is not None else "parse_failure", p_raw=p_raw,
                      format_mass=mass, p_yes=p_yes, p_no=p_no, tokens=len(enc.ids),
                      seconds=time.perf_counter() - start)
    return (with_defense_record(verdict, enc.defense),
            {"mode": "cached", "reused_tokens": reused, "computed_tokens": computed})
