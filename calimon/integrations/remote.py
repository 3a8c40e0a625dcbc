"""`RemoteMonitor`: the same `Assessment` s from a ``calimon serve`` server (``POST /v1/score``,
docs/serve.md), for an agent framework that should not load a model itself.

The transcript is rendered here, as in process (`calimon.integrations.transcripts`), and sent as
``request`` and ``response`` text, so the server scores exactly what ``calimon score`` would; its
evidence spans (characters of the response) are mapped back to the messages here. The API key
is read from ``CALIMON_API_KEY`` at request time (or given), sent as ``Authorization: Bearer``,
and never stored or logged. Each request carries a fresh ``request_id``, so a retry of a request
the server already answered is answered from its decision log, not scored twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from calimon.errors import InputError
from calimon.integrations.assessment import DECISIONS, Assessment
from calimon.integrations.local import span_record
from calimon.samples import Sample


class RemoteMonitor:
    """A ``calimon serve`` server at ``url`` (e.g. ``http://127.0.0.1:8000``) as a monitor.
    ``concurrency``: requests in flight at once for a batch (the server gathers them)."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 120.0,
                 retries: int = 2, concurrency: int = 8):
        from calimon.backends.http_client import JsonClient

        base = url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        self.url = base
        self.client = JsonClient(base, timeout_s=timeout_s, retries=retries,
                                 api_key_env=("CALIMON_API_KEY",), api_key=api_key)
        self.concurrency = max(1, int(concurrency))

    def assess(self, samples: Sequence[Sample]) -> list[Assessment]:
        """One `Assessment` per sample, in order (blocking; requests sent concurrently)."""
        if len(samples) <= 1:
            return [self._one(s) for s in samples]
        with ThreadPoolExecutor(min(self.concurrency, len(samples))) as pool:
            return list(pool.map(self._one, samples))

    def _one(self, sample: Sample) -> Assessment:
        body = {"request_id": uuid.uuid4().hex, "id": safe_id(sample.id),
                "request": sample.request, "response": sample.response}
        answer = self.client.request("POST", "score", body)
        return assessment_from_answer(sample, answer, self.url)


def safe_id(text: str) -> str:
    """A transcript id the server accepts (letters, digits and ``._:@/+=-``, at most 200
    characters): other characters become ``-``."""
    import re

    return re.sub(r"[^A-Za-z0-9._:@/+=-]", "-", text)[:200] or "transcript"


def assessment_from_answer(sample: Sample, answer: Any, url: str) -> Assessment:
    """A ``/v1/score`` answer (issue 35's ``ScoreResponse``) as an `Assessment`; an answer
    without its fields is an error naming the field, not a silent 0."""
    if not isinstance(answer, dict):
        raise InputError(f"expected a JSON object from {url}/score, got {type(answer).__name__}",
                         field="answer")
    missing = [k for k in ("p_raw", "decision", "action", "status") if k not in answer]
    if missing:
        raise InputError(f"the answer of {url}/score has no {missing[0]!r} field (is it a "
                         "calimon serve server?)", field=missing[0])
    if answer["decision"] not in DECISIONS.values():
        raise InputError(f"unknown decision {answer['decision']!r} from {url}/score",
                         field="decision")
    spans, quotes = [], []
    for ev in answer.get("evidence") or []:
        quotes.append(str(ev.get("text", "")))
        if ev.get("start") is not None and ev.get("end") is not None:
            spans.append(span_record(sample, ev["start"], ev["end"], ev.get("score")))
    score = answer.get("score") or "p_raw"
    prov = {"model": answer.get("model"), "model_revision": answer.get("model_revision"),
            "readout": answer.get("readout"), "scored": url,
            "calibration": "none" if score == "p_raw" and answer.get("p_cal") is None
            else "served", "policy": answer.get("policy"),
            "policy_hash": answer.get("policy_hash"), "policy_score": score,
            "request_id": answer.get("request_id")}
    return Assessment(id=sample.id, status=answer["status"], p_raw=answer["p_raw"],
                      p_cal=answer.get("p_cal"), action=answer["action"],
                      decision=answer["decision"], audit=bool(answer.get("audit")),
                      spans=tuple(spans), evidence=tuple(quotes), tokens=answer.get("tokens"),
                      latency_ms=answer.get("latency_ms"),
                      transcript_hash=sample.transcript_hash, provenance=prov)


__all__ = ["RemoteMonitor", "assessment_from_answer", "safe_id"]
