"""`POST /v1/sessions/{id}/steps`: a trajectory scored as its steps arrive.

A step appends its messages to the session's trajectory and scores the whole trajectory so far,
with a decision, so a caller can check a tool call before it runs. On the transformers backend
with a verdict or json readout, the session's cache (`calimon.serve.kv`) makes a step cost its new
tokens and the question after them; with a probe head or bundle, its new tokens up to the
probe's layer (`calimon.serve.probe_steps`); the reading equals the whole trajectory's
(`/v1/score`) up to float rounding. Otherwise, or when the prompt is over the model's input limit
(it is cut head_tail and the cut recorded), the whole prompt is scored (``kv.mode`` ``full``).

Steps of one session run one at a time, in arrival order; the ``step`` field, when sent, must
be the session's next index (409 otherwise), and a session the server does not hold accepts only
step 0, so a step is never appended to a trajectory the server lost. Resending a session's steps
with their request ids after a restart replays them from the decision log and rebuilds the
session, whose next step then scores as before.
"""

from __future__ import annotations

import time
from typing import Any

from calimon.defenses import with_defense_record
from calimon.numerics.readouts import answer_token_ids, read_distribution
from calimon.samples import Sample
from calimon.serve.decision_log import LoggedDecision
from calimon.serve.errors import ApiError
from calimon.serve.kv import extend, full_use
from calimon.serve.messages import transcript
from calimon.serve.probe_steps import probe_step
from calimon.serve.schemas import StepRequest
from calimon.serve.service import (
    Service,
    body_hash,
    check_messages,
    check_total,
    sample_of,
)
from calimon.serve.sessions import Session
from calimon.verdict import Verdict


async def step(service: Service, session_id: str, req: StepRequest, received: float
               ) -> tuple[dict, bool]:
    """Answer one step (module docstring): ``(answer, replayed)``."""
    digest = body_hash({"session_id": session_id, **req.model_dump(mode="json")})

    async def produce(rid: str) -> dict:
        session = service.sessions.get(session_id)
        if session is None:
            if req.step not in (None, 0):
                raise ApiError(409, "unknown_session", f"session {session_id!r} is not open "
                               "here (it expired, or the server restarted): resend its steps "
                               "in order from step 0 with their request ids", "step")
            session = service.sessions.open(session_id)
        async with session.lock:
            return await _locked_step(service, session, req, rid, digest, received)

    answer, replayed = await service.once(req.request_id, digest, produce)
    if replayed:
        await _catch_up(service, session_id, req, answer)
    return answer, replayed


async def _catch_up(service: Service, session_id: str, req: StepRequest, answer: dict) -> None:
    """A replayed step the session does not hold yet is appended now, so the trajectory
    matches the log: a server restarted on its log rebuilds a session from its steps resent
    in order (step 0 opens it), and a step cancelled between the log's commit and the append
    is appended on its retry."""
    session = service.sessions.get(session_id)
    if session is None:
        if answer.get("step") != 0:
            return
        session = service.sessions.open(session_id)
    async with session.lock:
        if answer.get("session_id") == session_id and answer.get("step") == session.steps:
            if session.steps == 0:
                session.request = req.request
            session.messages = [*session.messages, *req.messages]
            session.steps += 1


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
    sample = sample_of(request, response)
    verdict, kv = await _reading(service, session, sample)
    index = session.steps
    audit_id = f"{session.id}#{index}"
    answer = service.answer(rid, verdict, response, audit_id, received)
    answer.update(session_id=session.id, step=index, kv=kv)
    shadow = await service.policies.shadow_answer(sample, verdict, audit_id)
    logged = await service.commit(LoggedDecision(rid, "step", digest, answer,
                                                 session_id=session.id, step=index),
                                  (request, response, audit_id, messages), shadow)
    session.messages, session.request, session.steps = messages, task, index + 1
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
    held = session.kv or service.heads.seed(monitor.backend, enc.ids[:enc.prefix_len])
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
