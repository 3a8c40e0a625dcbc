"""The escalation policy file (``configs/policies/NAME.yaml``): the ``Policy`` model, reading
and writing it, building one from an optimizer result, and applying it to scores.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from calimon.deploy.policies import Action, PolicyDesign, decide
from calimon.errors import ConfigError


class PolicyActions(BaseModel):
    """Action per region; ``unscored``: a transcript whose monitor gave no score."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    below: Action = "auto_pass"
    band: Action = "human_review"
    above: Action = "auto_block"
    unscored: Action = "human_review"


class Audit(BaseModel):
    """The audit slice: a ``fraction`` of the auto_pass and auto_block transcripts also goes
    to review, chosen by a hash of ``seed:id`` (:func:`audit_draw`), independent of the label,
    so reviewed transcripts form a sample with known inclusion probabilities (1 for
    human_review, ``fraction`` for the automatic actions). 0: no audit."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    fraction: float = Field(default=0.0, ge=0, lt=1)
    seed: int = 0

    def includes(self, rid: str) -> bool:
        """True when transcript ``rid`` falls in the audit slice."""
        return self.fraction > 0 and audit_draw(rid, self.seed) < self.fraction


def audit_draw(rid: str, seed: int) -> float:
    """A uniform number in [0, 1) fixed by ``seed`` and the transcript id (sha256)."""
    import hashlib

    h = hashlib.sha256(f"{int(seed)}:{rid}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0 ** 64


class Guarantee(BaseModel):
    """A certificate as stored in a policy file (see ``CertifiedThreshold``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rate: Literal["far", "mr"]
    action: Action
    alpha: float = Field(gt=0, lt=1)
    delta: float = Field(gt=0, lt=1)
    certified: bool
    threshold: float
    bound: float = Field(ge=0, le=1)
    empirical: float = Field(ge=0, le=1)
    n: int = Field(ge=1)
    k: int = Field(ge=0)
    method: str


class PinnedMonitor(BaseModel):
    """What the design run scored with (its curve.json provenance, else its map's): the monitor
    a server or an integration builds for the policy, and checks it built (`calimon.provenance`).
    None: not recorded by the run."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = Field(min_length=1)
    model_revision: str | None = None
    prompt: str = Field(min_length=1)
    template_hash: str | None = None
    readout: str = Field(min_length=1)
    defenses: list[str] = []
    max_input_tokens: int | None = Field(default=None, ge=1)
    truncation: str = Field(default="head_tail", pattern=r"^(head_tail|window(:[a-z]+:[0-9.]+)?)$")


class Pin(BaseModel):
    """What a version-2 policy carries so that it decides the same from any folder
    (`calimon.deploy.pinned`): the sha256 of the scored CSV its thresholds were chosen on,
    the monitor it was designed for, and its calibration map, whole (the JSON object of a
    ``calibration/<method>.json``, with its ``map_sha256``: `StoredMap.digest`). ``monitor`` /
    ``map`` are None when the design run recorded none (such a policy is applied to scored CSVs
    only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    design_run_sha256: str = Field(min_length=1)
    monitor: PinnedMonitor | None = None
    map: dict[str, Any] | None = None
    map_sha256: str | None = None

    @model_validator(mode="after")
    def _map_and_digest(self) -> Pin:
        if (self.map is None) != (self.map_sha256 is None):
            raise ValueError("map and map_sha256 go together (both or neither)")
        return self


class Policy(BaseModel):
    """A deployable escalation policy (``configs/policies/NAME.yaml``).

    ``score``: which column of a scored CSV it reads (``p_cal`` or ``p_raw``);
    ``calibration``: the calibration method behind that score, ``none`` for ``p_raw``.
    ``version`` 2 carries its ``pin`` (`Pin`); a version-1 file (no pin) is still read, and
    applied to scored CSVs, but served only once pinned (``calimon pin-policy``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: Literal[1, 2]
    name: str = Field(min_length=1)
    readout: str = Field(min_length=1)
    model: str = Field(min_length=1)
    calibration: str = Field(min_length=1)
    score: Literal["p_cal", "p_raw"]
    t_low: float
    t_high: float
    actions: PolicyActions = PolicyActions()
    audit: Audit = Audit()
    guarantees: list[Guarantee] = []
    pin: Pin | None = Field(default=None, validate_default=True)
    provenance: dict[str, Any] = {}

    @field_validator("t_low", "t_high")
    @classmethod
    def _not_nan(cls, v: float) -> float:
        if math.isnan(v):
            raise ValueError("must be a number, not NaN")
        return v

    @field_validator("t_high")
    @classmethod
    def _ordered(cls, v: float, info: ValidationInfo) -> float:
        low = info.data.get("t_low")
        if low is not None and v < low:
            raise ValueError(f"t_high ({v}) must be >= t_low ({low})")
        return v

    @field_validator("pin")
    @classmethod
    def _pinned_from_version_2(cls, v: Pin | None, info: ValidationInfo) -> Pin | None:
        version = info.data.get("version")
        if version == 2 and v is None:
            raise ValueError("a version-2 policy carries its pin (calimon escalate writes it)")
        if version == 1 and v is not None:
            raise ValueError("a pin needs version 2")
        return v

    @field_validator("score")
    @classmethod
    def _score_matches_calibration(cls, v: str, info: ValidationInfo) -> str:
        cal = info.data.get("calibration")
        if cal is not None and (v == "p_raw") != (cal == "none"):
            raise ValueError(f"score {v!r} does not match calibration {cal!r} (p_raw goes with "
                             f"calibration 'none', p_cal with a calibration method)")
        return v


def load_policy(path: str | Path) -> Policy:
    """Read a policy YAML; errors name the file, the line where known, and the field."""
    from calimon.config import load_yaml_model

    if not Path(path).is_file():
        raise ConfigError("no such file", path=str(path))
    return load_yaml_model(Path(path), Policy)


def save_policy(policy: Policy, path: str | Path) -> Path:
    """Write ``policy`` as YAML (floats round-trip exactly; +-inf as .inf)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = policy.model_dump(exclude={"pin"} if policy.pin is None else None)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    out.write_text(f"# calimon escalation policy (docs/deployment.md)\n{text}", encoding="utf-8")
    return out


def policy_from_design(design: PolicyDesign, *, name: str, readout: str, model: str,
                       calibration: str, score: str = "p_cal",
                       provenance: dict[str, Any] | None = None,
                       audit: Audit | None = None, pin: Pin | None = None) -> Policy:
    """A Policy from an optimizer result (version 2 with ``pin``, else version 1);
    ``provenance`` must hold plain YAML types."""
    guarantees = [Guarantee(**{k: v for k, v in g.to_dict().items() if k != "p_value"},
                            action="auto_block" if g.rate == "far" else "auto_pass")
                  for g in design.guarantees]
    try:
        return Policy(version=1 if pin is None else 2, name=name, readout=readout,
                      model=model, calibration=calibration, score=score, t_low=design.t_low,
                      t_high=design.t_high, guarantees=guarantees, audit=audit or Audit(),
                      pin=pin, provenance=dict(provenance or {}))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(err["msg"], field=".".join(map(str, err["loc"]))) from None


def apply_policy(policy: Policy, scores: Any) -> np.ndarray:
    """Action per score under ``policy``; NaN (no score) gets ``policy.actions.unscored``."""
    a = policy.actions
    return decide(scores, policy.t_low, policy.t_high, below=a.below, band=a.band,
                  above=a.above, unscored=a.unscored)
