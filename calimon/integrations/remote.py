"""`RemoteMonitor`: the same `Assessment` s from a ``calimon serve`` server (``POST /v1/score``,
docs/serve.md; its typed request and answer, `calimon.serve.schemas`), for an agent framework
that should not load a model itself.

The transcript is rendered here, as in process (`calimon.integrations.transcripts`), and sent as
``request`` and ``response`` text, so the server scores exactly what ``calimon score`` would; its
evidence spans (characters of the response) are mapped back to the messages here. The API key
is read from ``CALIMON_API_KEY`` at request time (or given), sent as ``Authorization: Bearer``,
and never stored or logged. Each request carries a fresh ``request_id``, so a retry of a request
the server already answered is answered from its decision log, not scored twice. A trajectory
scored at every step of an agent goes through `RemoteMonitor.assess_step`: one server session per
trajectory, each step sending its new messages (`calimon.integrations.remote_steps`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from calimon.errors import InputError
from calimon.integrations.assessment import Assessment, ranked_spans
from calimon.integrations.local import span_record
from calimon.integrations.remote_steps import SessionClient, sendable
from calimon.samples import Sample


class RemoteMonitor:
    """A ``calimon serve`` server at ``url`` (e.g. ``http://127.0.0.1:8000``) as a monitor.
    ``concurrency``: requests in flight at once for a batch (the server gathers them)."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 120.0,
                 retries: int = 2, concurrency: int = 8):
        from calimon.scoring.backends.http_client import JsonClient

        base = url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        self.url = base
        self.client = JsonClient(base, timeout_s=timeout_s, retries=retries,
                                 api_key_env=("CALIMON_API_KEY",), api_key=api_key)
        self.concurrency = max(1, int(concurrency))
        self._info: dict[str, Any] | None = None
        self.sessions = SessionClient(self.client)

    def info(self) -> dict[str, Any]:
        """The server's ``/v1/info`` (policy, monitor, map; serve's `Info`), read once."""
        if self._info is None:
            from calimon.serve.schemas import Info

            self._info = Info.model_validate(self.client.request("GET", "info", None)).model_dump()
        return self._info

    def assess(self, samples: Sequence[Sample]) -> list[Assessment]:
        """One `Assessment` per sample, in order (blocking; requests sent concurrently)."""
        if len(samples) <= 1:
            return [self._one(s) for s in samples]
        with ThreadPoolExecutor(min(self.concurrency, len(samples))) as pool:
            return list(pool.map(self._one, samples))

    def assess_step(self, key: str, sample: Sample, messages: Sequence[Any]) -> Assessment:
        """The `Assessment` of ``sample``, the trajectory of chat ``messages``, as the next step
        of the server session of trajectory ``key``: only the messages added since the last
        step are sent (`calimon.integrations.remote_steps`); ``kv`` says what the step cost. A
        trajectory the server would not read as ``sample``'s text is scored whole (`assess`)."""
        records = sendable(messages, sample)
        if records is None:
            return self._one(sample)
        answer = self.sessions.step(key, sample.request, records)
        return replace(assessment_from_answer(sample, answer, self.url, self.info()),
                       kv=answer.get("kv"))

    def forget(self, key: str) -> None:
        """Delete the server session of trajectory ``key``, if there is one."""
        self.sessions.forget(key)

    def _one(self, sample: Sample) -> Assessment:
        from calimon.serve.schemas import ScoreRequest

        body = ScoreRequest(request_id=uuid.uuid4().hex, id=safe_id(sample.id),
                            request=sample.request, response=sample.response)
        answer = self.client.request("POST", "score", body.model_dump(exclude_none=True))
        return assessment_from_answer(sample, answer, self.url, self.info())


def safe_id(text: str) -> str:
    """A transcript id the server accepts (letters, digits and ``._:@/+=-``, at most 200
    characters): other characters become ``-``."""
    import re

    return re.sub(r"[^A-Za-z0-9._:@/+=-]", "-", text)[:200] or "transcript"


def assessment_from_answer(sample: Sample, answer: Any, url: str,
                           info: dict[str, Any] | None = None) -> Assessment:
    """A ``/v1/score`` answer, read as serve's own `calimon.serve.schemas.ScoreResponse`, as an
    `Assessment` (``info``: the server's ``/v1/info``, for the prompt, template hash and map in
    the provenance); an answer that is not one is an error naming the field, never a silent 0."""
    from pydantic import ValidationError

    from calimon.serve.schemas import ScoreResponse

    try:
        r = ScoreResponse.model_validate(answer)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"the answer of {url}/score is not a calimon serve ScoreResponse: "
                         f"{err['msg']}", field=".".join(map(str, err["loc"])) or None) from None
    located = [ev for ev in r.evidence if ev.start is not None and ev.end is not None]
    tokens = tuple(span_record(sample, ev.start, ev.end, ev.score) for ev in located
                   if ev.unit != "segment")
    spans = tuple(span_record(sample, ev.start, ev.end, ev.score, ev.precision,
                              unit="segment", rank=ev.rank) for ev in located
                  if ev.unit == "segment")
    if not spans:  # a server without segments: its spans, strongest first
        spans = tuple({**t, "rank": k} for k, t in enumerate(ranked_spans(tokens)))
    info = info or {}
    calibration = "none" if r.score == "p_raw" else info.get("calibration") or "served"
    prov = {"model": r.model, "model_revision": r.model_revision, "prompt": info.get("prompt"),
            "template_hash": info.get("template_hash"), "readout": r.readout, "scored": url,
            "calibration": calibration, "calibration_map": info.get("calibration_map"),
            "policy": r.policy, "policy_hash": r.policy_hash, "policy_score": r.score,
            "request_id": r.request_id}
    return Assessment(id=sample.id, status=r.status, p_raw=r.p_raw, p_cal=r.p_cal,
                      action=r.action, decision=r.decision, audit=r.audit, spans=spans,
                      token_spans=tokens,
                      evidence=tuple(ev.text for ev in r.evidence if ev.unit != "tokens"), tokens=r.tokens,
                      latency_ms=r.latency_ms, transcript_hash=sample.transcript_hash,
                      provenance=prov)


__all__ = ["RemoteMonitor", "assessment_from_answer", "safe_id"]
