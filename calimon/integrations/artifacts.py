"""What a policy file or a model name brings with it: the calibration map, the prompt, the input
limit and defenses of the run it was designed on.

A policy (`calimon escalate`) names the model, the readout, the calibration method and the
thresholds; its provenance ``source`` names the scored CSV of its design run. The map is the one
given, else that run's ``calibration/<method>.json``, else the map a probe bundle ships
(``probe:<bundle>`` readouts); the prompt the one given, else the map's, else the run's. A
policy that reads ``p_cal`` and finds no map is an error naming what was looked for, never an
uncalibrated score.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calimon.deploy.design import design_run, run_provenance
from calimon.errors import InputError


@dataclass(frozen=True)
class PolicyContext:
    """A policy with its file's sha256 and what its design run recorded (``run``: the
    ``provenance`` block of its curve.json; ``run_dir``: None when it is not on this machine)."""

    policy: Any
    path: str
    sha256: str
    run_dir: Path | None
    run: dict[str, Any] = field(default_factory=dict)


def read_policy(path: str | Path) -> PolicyContext:
    """Load a policy file (`calimon.deploy.policy_file.load_policy`) and find its design run;
    a policy that names no model or readout is refused (it cannot say which monitor to run)."""
    from calimon.deploy.policy_file import load_policy

    p = Path(path)
    policy = load_policy(p)
    for key in ("model", "readout"):
        if getattr(policy, key) == "unknown":
            raise InputError(f"the policy names no {key} (its design run did not record one): "
                             f"re-run calimon escalate with --{key}", path=str(p), field=key)
    run_dir = design_run(policy, p)
    return PolicyContext(policy, str(p), hashlib.sha256(p.read_bytes()).hexdigest(), run_dir,
                         run_provenance(run_dir))


def policy_map_path(ctx: PolicyContext, given: str | Path | None) -> Path | None:
    """The map a policy's score needs: ``given``, else its design run's
    ``calibration/<method>.json``; None when the policy reads ``p_raw`` or no file was found
    (the caller then tries a bundle's map, see `require_map`)."""
    policy = ctx.policy
    if policy.score == "p_raw":
        if given is not None:
            raise InputError(f"policy {policy.name!r} reads p_raw (calibration 'none'): it "
                             "applies no map", path=ctx.path, field="calibration_map")
        return None
    if given is not None:
        return Path(given)
    if ctx.run_dir is not None:
        path = ctx.run_dir / "calibration" / f"{policy.calibration}.json"
        if path.is_file():
            return path
    return None


def require_map(ctx: PolicyContext, stored: Any) -> None:
    """Refuse a p_cal policy without a map, or with a map of another method."""
    policy = ctx.policy
    if policy.score == "p_raw":
        return
    if stored is None:
        where = (f"not in {ctx.run_dir}/calibration" if ctx.run_dir is not None else
                 "its design run, provenance 'source', is not on this machine")
        raise InputError(f"policy {policy.name!r} reads p_cal through a {policy.calibration!r} "
                         f"map, which was not found ({where}): give calibration_map=PATH",
                         path=ctx.path, field="calibration_map")
    if stored.method != policy.calibration:
        raise InputError(f"the map is a {stored.method!r} map; the policy reads "
                         f"{policy.calibration!r}", path=stored.path or ctx.path,
                         field="method")


def bundle_map(monitor: Any) -> Any:
    """The calibration map a probe bundle ships (``probe:<bundle>`` readouts), or None."""
    bundle = getattr(monitor, "bundle", None)
    return getattr(bundle, "calibration", None)


def monitor_provenance(monitor: Any, defenses: tuple[str, ...] = ()) -> dict[str, Any]:
    """What identifies a built monitor's readings (`calimon.provenance.CHECKED`)."""
    key = monitor.key
    return {"model": key.model, "model_revision": key.model_revision, "prompt": key.prompt,
            "template_hash": key.template_hash, "readout": key.readout,
            "defenses": list(defenses)}


__all__ = ["PolicyContext", "bundle_map", "design_run", "monitor_provenance", "policy_map_path",
           "read_policy", "require_map", "run_provenance"]
