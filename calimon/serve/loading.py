"""The monitor a policy names, loaded once for a server (`ServedMonitor.load`), and the decision
it makes of a reading.

A policy file (`calimon escalate`) names the model, the readout, the calibration method and the
thresholds, and its provenance the run it was designed on. The rest is found there: the map is
that run's ``calibration/<method>.json`` (or ``--map``), the prompt the one the map or the run
recorded (or ``--prompt``), with the run's defenses, input limit and truncation policy
(head_tail, or the window policy, which applies to session steps too:
`calimon.serve.probe_steps`). The monitor built from them must be the one the map and the policy were made for (`calimon.provenance`: model, revision,
prompt, template hash, readout, defenses); a mismatch is refused unless ``force``, and what was
let through is kept in ``forced``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from calimon.calibration.io import StoredMap, load_map
from calimon.defaults import DEFAULT_PROMPT
from calimon.deploy.design import design_run, run_provenance
from calimon.deploy.policy_file import Policy, apply_policy, load_policy
from calimon.errors import InputError, ModelNotAvailableError
from calimon.samples import Sample
from calimon.serve.settings import ServeSettings
from calimon.verdict import Verdict

DECISIONS = {"auto_pass": "pass", "human_review": "review", "auto_block": "block"}
KV_READOUTS = ("verdict", "json")


def find_map(policy: Policy, given: Path | None, run_dir: Path | None) -> Path | None:
    """The calibration map the policy's score needs: ``given``, else the design run's
    ``calibration/<method>.json``; None for a policy that reads ``p_raw``."""
    if policy.score == "p_raw":
        if given is not None:
            raise InputError(f"policy {policy.name!r} reads p_raw (calibration 'none'): it "
                             "applies no map", field="calibration_map")
        return None
    if given is not None:
        return given
    if run_dir is not None:
        path = run_dir / "calibration" / f"{policy.calibration}.json"
        if path.is_file():
            return path
    where = f" (not in {run_dir}/calibration)" if run_dir is not None else (
        " (its design run, provenance 'source', is not on this machine)")
    raise InputError(f"policy {policy.name!r} reads p_cal through a {policy.calibration!r} "
                     f"map, which was not found{where}: give it with --map", field="map")


def _require_named(policy: Policy, path: Path) -> None:
    for key in ("model", "readout"):
        if getattr(policy, key) == "unknown":
            raise InputError(f"the policy names no {key} (it was designed on a run that did not "
                             f"record one): re-run calimon escalate with --{key}",
                             path=str(path), field=key)


@dataclass
class ServedMonitor:
    """A loaded monitor with the policy and map it serves. ``forced``: provenance mismatches
    let through by ``--force``."""

    monitor: Any
    policy: Policy
    policy_hash: str
    stored_map: StoredMap | None
    map_path: str | None
    forced: list[str]

    @classmethod
    def load(cls, settings: ServeSettings) -> ServedMonitor:
        """Read the policy, find its map and prompt, build the monitor and check provenance
        (module docstring). No weights load here (see `warm`)."""
        from calimon.provenance import meet

        path = Path(settings.policy)
        policy = load_policy(path)
        _require_named(policy, path)
        run_dir = design_run(policy, path)
        run = run_provenance(run_dir)
        map_path = find_map(policy, settings.calibration_map, run_dir)
        stored = load_map(map_path) if map_path is not None else None
        if stored is not None and stored.method != policy.calibration and not settings.force:
            raise InputError(f"the map is a {stored.method!r} map; the policy reads "
                             f"{policy.calibration!r} (--force applies it anyway)",
                             path=str(map_path), field="method")
        prompt = settings.prompt or (stored.extra.get("prompt") if stored else None) \
            or run.get("prompt") or DEFAULT_PROMPT
        spec = settings.backend.monitor_spec(policy.model, prompt, policy.readout)
        limit = settings.max_input_tokens or run.get("max_input_tokens")
        spec = replace(spec, max_input_tokens=int(limit) if limit else None,
                       defenses=tuple(run.get("defenses") or ()),
                       truncation=settings.truncation or recorded_truncation(run))
        try:
            monitor = spec.build(spec.build_backend(shared=False))
        except ModelNotAvailableError as exc:  # the policy names the model, not a --model flag
            raise ModelNotAvailableError(f"{path}: {exc.named_as('model:')}") from None
        mine = monitor_provenance(monitor, spec.defenses)
        forced = meet("escalation policy", {"model": policy.model, "readout": policy.readout},
                      mine, force=settings.force, path=str(path))
        if stored is not None:
            forced += meet("calibration map", stored.extra, mine, force=settings.force,
                           path=str(map_path))
        forced += meet("design run", run, mine, force=settings.force, path=str(run_dir))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return cls(monitor, policy, digest, stored, str(map_path) if map_path else None,
                   list(dict.fromkeys(forced)))

    @property
    def backend(self):
        """The monitor's backend."""
        return self.monitor.backend

    @property
    def gathers(self) -> bool:
        """Whether requests are gathered into shared forward passes (the transformers backend);
        other backends take the concurrency as it comes."""
        return getattr(type(self.backend), "name", "") == "transformers"

    def warm(self) -> None:
        """Load the weights (and the template's shared prefix) before the first request, so a
        server that answers /healthz answers requests at full speed."""
        from calimon.scoring.backends import LocalWeights, supports

        if supports(self.backend, LocalWeights):
            self.score([Sample(id="warm-up", request="warm-up", response="warm-up",
                               label=None, category="safety", task="reasoning",
                               pair_id="warm-up")])

    def score(self, samples: list[Sample]) -> list[Verdict]:
        """One reading per sample from one monitor call (a batch's faults isolated sample by
        sample, `calimon.scoring.monitor.score_chunk`)."""
        from calimon.scoring.monitor import score_chunk

        return score_chunk(self.monitor, samples)

    def calibrate(self, p_raw: float | None) -> float | None:
        """The calibrated score of ``p_raw`` (None stays None; no map: None)."""
        if p_raw is None or self.stored_map is None:
            return None
        return float(np.clip(self.stored_map.predict(np.array([p_raw])), 0.0, 1.0)[0])

    def decide(self, verdict: Verdict, audit_id: str) -> dict[str, Any]:
        """The policy's answer to a reading: p_raw, p_cal, the action and decision (a reading
        without a score gets the policy's ``unscored`` action, never a 0 score), and whether
        an automatic decision falls in the audit slice (drawn on ``audit_id``)."""
        p_raw = verdict.p_raw if verdict.scored else None
        p_cal = self.calibrate(p_raw)
        score = p_cal if self.policy.score == "p_cal" else p_raw
        action = str(apply_policy(self.policy, [math.nan if score is None else score])[0])
        audit = action != "human_review" and self.policy.audit.includes(audit_id)
        return {"p_raw": p_raw, "p_cal": p_cal, "score": self.policy.score, "action": action,
                "decision": DECISIONS[action], "audit": bool(audit)}

    @property
    def kv_capable(self) -> bool:
        """Whether a session can extend a cached KV (`calimon.serve.kv`): a verdict or json
        readout of a prompted monitor on the transformers backend."""
        from calimon.scoring.monitor import Monitor

        return (self.gathers and isinstance(self.monitor, Monitor)
                and self.monitor.readout in KV_READOUTS and self.monitor.constraint is None)

    @property
    def probe_capable(self) -> bool:
        """Whether a session can extend a probe head's state (`calimon.serve.probe_kv`): a
        probe head or bundle, windowed or not, on the transformers backend."""
        from calimon.serve.probe_kv import probe_monitor

        return self.gathers and probe_monitor(self.monitor) is not None


def recorded_truncation(run: dict[str, Any]) -> str:
    """The truncation policy a design run recorded (`calimon.scoring.windows.truncation_record`)
    as the ``--truncation`` text that builds it; ``head_tail`` when it recorded none."""
    record = run.get("truncation") or {}
    if record.get("policy") != "window":
        return "head_tail"
    return f"window:{record.get('aggregate', 'max')}:{record.get('overlap', 0.25)}"


def monitor_provenance(monitor, defenses: tuple[str, ...]) -> dict[str, Any]:
    """What `calimon.provenance.meet` compares, for a built monitor."""
    key = monitor.key
    return {"model": key.model, "model_revision": key.model_revision, "prompt": key.prompt,
            "template_hash": key.template_hash, "readout": key.readout,
            "defenses": list(defenses)}
