"""The monitor a policy names, loaded once for a server (`ServedMonitor.load`), and the decision
it makes of a reading.

The policy file is read by the one resolver the integrations use too
(`calimon.deploy.pinned.resolve_policy`): a version-2 policy pins the monitor its design run
scored with and its calibration map, so the server decides the same from any folder. A map or
prompt given beside it must be the pinned one; the monitor built must be the pinned one
(`calimon.provenance`: model, revision, prompt, template hash, readout, defenses). A mismatch
is refused unless ``force``, and what was let through is kept in ``forced``. The truncation policy is pinned too (head_tail, or the window
policy, which applies to session steps as well: `calimon.serve.probe_steps`). A policy whose
monitor is external (model ``external``, a ``score:NAME`` readout) loads no model: its monitor
is the readout (`calimon.serve.external.ExternalMonitor`), and each request carries the score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from calimon.calibration.io import StoredMap
from calimon.deploy.pinned import monitor_identity, resolve_policy
from calimon.deploy.policy_file import Policy, apply_policy
from calimon.errors import ModelNotAvailableError
from calimon.samples import Sample
from calimon.serve.external import ExternalMonitor, is_external_pin
from calimon.serve.settings import ServeSettings
from calimon.verdict import Verdict

DECISIONS = {"auto_pass": "pass", "human_review": "review", "auto_block": "block"}
KV_READOUTS = ("verdict", "json")


@dataclass
class ServedMonitor:
    """A loaded monitor with the policy and map it serves (``map_path``: where the map came
    from: ``POLICY#pin.map``, or a file given with ``--force``). ``forced``: mismatches let
    through by ``--force``."""

    monitor: Any
    policy: Policy
    policy_hash: str
    stored_map: StoredMap | None
    map_path: str | None
    forced: list[str]
    spec: Any = None

    @classmethod
    def load(cls, settings: ServeSettings, reuse: ServedMonitor | None = None
             ) -> ServedMonitor:
        """Resolve the policy (module docstring), build its monitor and check it against the
        pin. No weights load here (see `warm`). ``reuse``: a loaded policy whose monitor is
        taken, not built again, when this policy pins the same one (a shadow or previous
        policy beside the live one)."""
        resolved = resolve_policy(settings.policy, calibration_map=settings.calibration_map,
                                  prompt=settings.prompt, force=settings.force)
        pinned = resolved.monitor
        if is_external_pin(pinned):
            monitor = ExternalMonitor.of(pinned, str(settings.policy))
            forced = resolved.meet(monitor.identity(), force=settings.force)
            return cls(monitor, resolved.policy, resolved.sha256, resolved.stored_map,
                       resolved.map_source, forced)
        spec = settings.backend.monitor_spec(pinned.model, resolved.prompt, pinned.readout)
        limit = settings.max_input_tokens or pinned.max_input_tokens
        spec = replace(spec, max_input_tokens=int(limit) if limit else None,
                       defenses=tuple(pinned.defenses),
                       truncation=settings.truncation or pinned.truncation)
        try:
            monitor = (reuse.monitor if reuse is not None and reuse.spec == spec else
                       spec.build(spec.build_backend(shared=False)))
        except ModelNotAvailableError as exc:  # the policy names the model, not a --model flag
            raise ModelNotAvailableError(f"{settings.policy}: {exc.named_as('model:')}") from None
        forced = resolved.meet(monitor_identity(monitor, spec.defenses), force=settings.force)
        return cls(monitor, resolved.policy, resolved.sha256, resolved.stored_map,
                   resolved.map_source, forced, spec)

    @property
    def external(self) -> bool:
        """Whether the policy's monitor is external: each request carries its score
        (`calimon.serve.external`)."""
        return isinstance(self.monitor, ExternalMonitor)

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
