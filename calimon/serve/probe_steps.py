"""Session steps of a probe monitor (a head or bundle, ``probe:NAME``) on the transformers backend.

A step's reading equals the whole trajectory's (`/v1/score`) within float rounding, and costs:

- ``incremental``: the step's new tokens (and the question after the transcript), run through
  the model only up to the probe's deepest layer, on top of what the session holds
  (`calimon.serve.probe_kv`), or, for a session holding none, on top of another session's
  cache sharing the prompt's prefix (`calimon.serve.prefixes`); ``full`` when nothing of the
  transcript could be reused: everything after the template head, to the same layer;
- ``windowed``: a trajectory over the model's input limit under the ``window`` policy
  (`calimon.scoring.windows`) is read in its windows, and a window the session read before (the
  same text) is not read again: a step reads the windows that are new, among them the last one,
  which ends at the trajectory's end;
- over the limit without the window policy, the prompt is cut head_tail and scored whole
  (``full``, as a prompted monitor's session).

``kv.layers`` says how many decoder layers the step's tokens went through.
"""

from __future__ import annotations

import time
from typing import Any

from calimon.samples import Sample
from calimon.serve.kv import full_use
from calimon.serve.probe_kv import ProbeState, depth_of, extend_probe, probe_monitor, seed_state
from calimon.serve.sessions import Session
from calimon.verdict import Verdict


def probe_step(service, session: Session, sample: Sample) -> tuple[Verdict, dict[str, Any]]:
    """On the model thread: the head's reading of ``sample`` (the trajectory so far) and what
    it cost (module docstring)."""
    monitor = service.served.monitor
    probe = probe_monitor(monitor)
    enc = probe.encoder.encode(sample.request, sample.response)
    if enc.truncation is not None:
        if getattr(monitor, "window_policy", None) is not None:
            return _windowed(service, session, monitor, sample)
        return _whole(service, session, sample)
    start = time.perf_counter()
    spec = probe.capture_spec
    depth = depth_of(spec)
    held = session.kv if isinstance(session.kv, ProbeState) and session.kv.ids else None
    if held is None:  # another session's cache sharing the prompt's prefix, if any
        held = service.prefixes.seed(enc.ids, enc.prefix_len,
                                     service.sessions.caches(but=session))
    if held is None:
        head = service.heads.seed(probe.backend, enc.ids[:enc.prefix_len], depth)
        held = seed_state(head, enc.response_start)
    got, state, reused = extend_probe(probe.backend, held, enc, spec)
    service.sessions.keep_kv(session, state)
    computed = len(enc.ids) - reused
    _count(service, reused, computed)
    verdict = probe.head_readings([sample], [enc], got, time.perf_counter() - start)[0]
    mode = "incremental" if reused > enc.prefix_len else "full"
    return verdict, {"mode": mode, "reused_tokens": reused, "computed_tokens": computed,
                     "layers": depth}


def _count(service, reused: int, computed: int) -> None:
    service.metrics.kv_tokens.inc("reused", by=reused)
    service.metrics.kv_tokens.inc("computed", by=computed)


def _whole(service, session: Session, sample: Sample) -> tuple[Verdict, dict[str, Any]]:
    """The prompt scored whole (cut head_tail); the session's state, of no use to a prompt that
    no longer fits, is dropped."""
    session.kv = None
    verdict = service.served.score([sample])[0]
    return verdict, {**full_use(service, verdict.tokens),
                     "layers": service.served.backend.num_layers}


def _windowed(service, session: Session, monitor, sample: Sample
              ) -> tuple[Verdict, dict[str, Any]]:
    """The trajectory read in its windows, those the session read before taken from it."""
    from calimon.scoring.monitor import score_chunk

    parts = monitor.windows(sample)
    if len(parts) == 1 and parts[0][1] is None:  # nothing to window (e.g. the request alone)
        return _whole(service, session, sample)
    held = session.kv.windows if isinstance(session.kv, ProbeState) else {}
    todo = list({w.transcript_hash: w for w, _ in parts if w.transcript_hash not in held}
                .values())
    fresh = score_chunk(monitor.inner, todo) if todo else []
    readings = {**held, **{w.transcript_hash: v for w, v in zip(todo, fresh, strict=True)}}
    ordered = [readings[w.transcript_hash] for w, _ in parts]
    verdict = monitor.aggregate(sample, parts, ordered)
    kept = {w.transcript_hash: readings[w.transcript_hash] for w, _ in parts
            if readings[w.transcript_hash].status != "error"}
    service.sessions.keep_kv(session, ProbeState([], None, 0, windows=kept))
    head = monitor.inner.encoder.prefix_len
    computed = sum(max(v.tokens - head, 0) for v in fresh)
    reused = sum(v.tokens for v in ordered) - computed
    _count(service, reused, computed)
    return verdict, {"mode": "windowed", "reused_tokens": reused, "computed_tokens": computed,
                     "layers": service.served.backend.num_layers,
                     "windows": {**monitor.window_policy.describe(), "windows": len(parts),
                                 "computed": len(todo)}}
