"""`LocalMonitor`: a calimon monitor in this process, built from a policy file or from a model
name, scoring transcripts into `Assessment` s (the reading, the calibrated probability, the
policy's decision, the evidence spans mapped to messages, the provenance).

It scores the way ``calimon score`` does (`calimon.scoring.monitor.score_chunk`: a batch's faults isolated
sample by sample, an error reading never a score), through the run store when one is given (so a
later ``calimon curve --store`` reuses the readings), and one call at a time: an agent framework
calls it from many tasks at once, the model runs one batch at a time. An agent's trajectory
scored at every step goes through `assess_step`: one session per trajectory, read by serve's step
path (`calimon.integrations.steps`), so a step costs its new tokens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from calimon.integrations.artifacts import (
    ResolvedPolicy,
    bundle_map,
    monitor_provenance,
    resolve_policy,
)
from calimon.integrations.assessment import Assessment, decide
from calimon.integrations.transcripts import message_refs
from calimon.samples import Sample
from calimon.verdict import Verdict


class LocalMonitor:
    """A monitor, its calibration map (optional) and policy (optional), scoring in process.
    Build it with `from_model` or `from_policy`; `assess` is thread-safe."""

    def __init__(self, monitor: Any, *, stored_map: Any = None, policy: ResolvedPolicy | None = None,
                 store: str | Path | None = None, defenses: tuple[str, ...] = (),
                 forced: Sequence[str] = ()):
        from calimon import __version__

        self.monitor = monitor
        self.stored_map = stored_map
        self.policy = policy
        self.store = Path(store) if store is not None else None
        self._lock = threading.Lock()
        self._steps: Any = None  # LocalSteps, made on the first step
        self.provenance: dict[str, Any] = {
            **monitor_provenance(monitor, defenses), "scored": "in-process",
            "calibration": stored_map.method if stored_map is not None else None,
            "calibration_map": (policy.map_source if policy is not None else
                                stored_map.path or None) if stored_map is not None else None,
            "map_fit_set_hash": stored_map.fit_set_hash if stored_map is not None else None,
            "policy": policy.policy.name if policy else None,
            "policy_hash": policy.sha256 if policy else None,
            "policy_score": policy.policy.score if policy else None,
            "forced": list(forced), "calimon_version": __version__}

    @classmethod
    def from_model(cls, model: str, *, readout: str = "verdict", prompt: str | None = None,
                   calibration_map: str | Path | None = None, backend: Any = None,
                   max_input_tokens: int | None = None, store: str | Path | None = None,
                   force: bool = False) -> LocalMonitor:
        """The monitor of ``model`` with ``readout`` and ``prompt`` (default: the map's, else
        ``direct``) on ``backend`` (`calimon.scoring.engines.BackendSettings`, or a backend
        itself, e.g. an Inspect model's; default: the transformers backend, the process's
        shared one, as ``calimon score`` uses).
        ``calibration_map``: a map file from a ``calimon curve`` run (checked against the
        monitor: model, revision, prompt, template hash, readout; ``force`` lets a mismatch
        through, recorded); a probe bundle's own map is used when none is given."""
        from calimon.calibration.io import load_map

        stored = load_map(calibration_map) if calibration_map is not None else None
        prompt = prompt or (stored.extra.get("prompt") if stored else None)
        return cls._build(model, readout, prompt, stored, backend=backend, store=store,
                          max_input_tokens=max_input_tokens, force=force)

    @classmethod
    def from_policy(cls, policy: str | Path, *, calibration_map: str | Path | None = None,
                    prompt: str | None = None, backend: Any = None,
                    store: str | Path | None = None, force: bool = False) -> LocalMonitor:
        """The monitor a policy file names (`calimon escalate`), with the map, prompt, input
        limit and defenses it pins, resolved as `calimon serve` resolves them
        (`calimon.deploy.pinned.resolve_policy`: the same from any folder; a map or prompt
        given here must be the pinned one, ``force`` applies another anyway, recorded)."""
        resolved = resolve_policy(policy, calibration_map=calibration_map, prompt=prompt,
                                  force=force)
        pinned = resolved.monitor
        _refuse_external(policy, pinned.readout)
        return cls._build(pinned.model, pinned.readout, resolved.prompt, resolved.stored_map,
                          policy=resolved, backend=backend, store=store, force=force,
                          max_input_tokens=pinned.max_input_tokens,
                          defenses=tuple(pinned.defenses))

    @classmethod
    def _build(cls, model: str, readout: str, prompt: str | None, stored: Any, *,
               policy: ResolvedPolicy | None = None, backend: Any = None,
               store: str | Path | None = None, max_input_tokens: int | None = None,
               defenses: tuple[str, ...] = (), force: bool = False) -> LocalMonitor:
        from calimon.defaults import DEFAULT_PROMPT
        from calimon.provenance import meet
        from calimon.scoring.engines import BackendSettings, MonitorSpec

        given = None
        if backend is None or isinstance(backend, BackendSettings):
            settings = backend if backend is not None else BackendSettings()
            spec = settings.monitor_spec(model, prompt or DEFAULT_PROMPT, readout)
        else:  # a backend itself: the one that scores (its model is the monitor's)
            given, model = backend, backend.model_ref.name
            spec = MonitorSpec(model=model, backend=backend.name,
                               prompt=prompt or DEFAULT_PROMPT, readout=readout)
        spec = replace(spec, max_input_tokens=max_input_tokens, defenses=defenses)
        monitor = spec.build(given if given is not None else spec.build_backend())
        mine = monitor_provenance(monitor, defenses)
        if policy is not None:  # the policy's own map and nothing else (None for p_raw)
            return cls(monitor, stored_map=stored, policy=policy, store=store,
                       defenses=defenses, forced=policy.meet(mine, force=force))
        forced: list[str] = []
        if stored is not None:
            forced += meet("calibration map", stored.extra, mine, force=force, path=stored.path)
        else:  # a model name without a map: a probe bundle's own map, if it ships one
            stored = bundle_map(monitor)
        return cls(monitor, stored_map=stored, store=store, defenses=defenses,
                   forced=list(dict.fromkeys(forced)))

    def readings(self, samples: Sequence[Sample]) -> list[Verdict]:
        """The monitor's reading of each sample, in order (through the run store if any)."""
        from calimon.scoring.monitor import score_chunk, score_with_store
        from calimon.scoring.store import RunStore

        with self._lock:
            if self.store is None:
                return score_chunk(self.monitor, list(samples))
            with RunStore(self.store) as st:  # one connection per call: callers' threads vary
                got = score_with_store(self.monitor, samples, st)
            return [got[s.transcript_hash] for s in samples]

    def assess_step(self, key: str, sample: Sample, messages: Sequence[Any] = ()
                    ) -> Assessment:
        """The `Assessment` of ``sample``, a trajectory that extends the one last scored under
        ``key`` (one session per trajectory: `calimon.integrations.steps.LocalSteps`): what the
        session read before is not read again, and the reading equals `assess`'s within float
        rounding; ``kv`` says what the step cost. With a run store, scored whole through it
        (`assess`). ``messages`` (the trajectory's chat messages) is not needed in process."""
        from calimon.integrations.steps import LocalSteps

        if self.store is not None:
            return self.assess([sample])[0]
        start = time.perf_counter()
        with self._lock:
            if self._steps is None:
                self._steps = LocalSteps(self.monitor)
            verdict, kv = self._steps.read(key, sample)
        a = self.assessment(sample, verdict, latency_ms=(time.perf_counter() - start) * 1000)
        return replace(a, kv=kv)

    def forget(self, key: str) -> None:
        """Forget the session of trajectory ``key`` (`assess_step`), if there is one."""
        with self._lock:
            if self._steps is not None:
                self._steps.forget(key)

    def calibrate(self, p_raw: float | None) -> float | None:
        """The map's probability for ``p_raw`` (None without a score or without a map)."""
        if p_raw is None or self.stored_map is None:
            return None
        return float(np.clip(self.stored_map.predict(np.array([p_raw])), 0.0, 1.0)[0])

    def assess(self, samples: Sequence[Sample]) -> list[Assessment]:
        """One `Assessment` per sample, in order (thread-safe; blocking)."""
        start = time.perf_counter()
        verdicts = self.readings(samples)
        ms = (time.perf_counter() - start) * 1000 / max(len(samples), 1)
        return [self.assessment(s, v, latency_ms=ms) for s, v in zip(samples, verdicts,
                                                                     strict=True)]

    def assessment(self, sample: Sample, verdict: Verdict, *,
                   latency_ms: float | None = None) -> Assessment:
        """A reading of ``sample`` as an `Assessment`: calibrated, decided, spans mapped."""
        p_raw = verdict.p_raw if verdict.scored else None
        p_cal = self.calibrate(p_raw)
        action = decision = None
        audit = False
        if self.policy is not None:
            action, decision, audit = decide(self.policy.policy, p_raw, p_cal, sample.id)
        spans, tokens = evidence_records(sample, verdict.extra or {}, self.monitor)
        return Assessment(id=sample.id, status=verdict.status, p_raw=p_raw, p_cal=p_cal,
                          action=action, decision=decision, audit=audit, spans=spans,
                          token_spans=tokens,
                          evidence=tuple(verdict.evidence), error=verdict.error,
                          tokens=verdict.tokens, latency_ms=latency_ms,
                          transcript_hash=sample.transcript_hash, provenance=self.provenance)


def _refuse_external(policy: str | Path, readout: str) -> None:
    """An externally scored policy has no monitor to run in this process: say where it runs."""
    from calimon.score_readout import is_score_readout

    if is_score_readout(readout):
        from calimon.errors import InputError

        raise InputError(
            f"the policy's monitor is external ({readout}): calimon has no model to run for it "
            "in this process; serve the policy (`calimon serve POLICY`) and send each "
            "transcript's score in the request's 'score' field (docs/serve.md), or use a "
            "policy whose monitor calimon runs", path=str(policy), field="readout")


def span_record(sample: Sample, start: int, end: int, score: float | None = None,
                precision: float | None = None, *, unit: str = "tokens",
                rank: int | None = None) -> dict[str, Any]:
    """A span of the response with its text and the messages it falls in."""
    start, end = int(start), int(end)
    return {"start": start, "end": end, "score": None if score is None else float(score),
            "precision": None if precision is None else float(precision), "unit": unit,
            "rank": rank, "text": sample.response[start:end],
            "messages": message_refs(sample, start, end)}


def evidence_records(sample: Sample, extra: dict[str, Any], monitor: Any = None
                     ) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """(the evidence strongest first, the token-level spans in text order) of a reading's
    ``extra``: its segments (ranked, with the precision of ``monitor``'s segment precision
    map) when it has them, else its spans ranked by score; the token spans are the token
    head's runs."""
    from calimon.integrations.assessment import ranked_spans
    from calimon.scoring.probes.monitor import segment_evidence

    tokens = tuple(span_record(sample, *sp) for sp in extra.get("spans") or ())
    segments = segment_evidence(extra, monitor)
    if segments:
        return tuple(span_record(sample, a, b, s, p, unit="segment", rank=k)
                     for k, (a, b, s, p) in enumerate(segments)), tokens
    ranked = ranked_spans(tokens)
    return tuple({**r, "rank": k} for k, r in enumerate(ranked)), tokens


__all__ = ["LocalMonitor", "evidence_records", "span_record"]
