"""Deployment tools: thresholds with guarantees, uncertainty, prevalence, escalation policies.

Modules (see ``docs/deployment.md``):

- ``io``: ``read_scored_csv`` -> ``ScoredSet``; calib / test split; synthetic runs.
- ``guarantees``: Clopper-Pearson bounds, ``certify_far`` / ``certify_mr`` (fixed-sequence
  Learn-then-Test), ``samples_needed``, ``thresholds_run``.
- ``uncertainty``: ``bootstrap_intervals`` (pair-clustered, per category and task).
- ``prevalence``: ``at_prevalence``, ``prevalence_report``, ``reweight_to_prevalence``.
- ``policies``: ``evaluate_policy``, ``optimize_budget``, ``optimize_cost``,
  ``coverage_risk_curve``; ``policy_file``: the ``Policy`` YAML, ``apply_policy``;
  ``escalation``: ``escalate_run``, ``apply_policy_file``.
- ``cascade``: ``evaluate_cascade``, ``design_cascade``, ``align_stages``.
- ``control_safety``: ``control_safety`` (certified audit thresholds and safety of a control
  evaluation); ``control_run``: ``control_safety_run``, ``read_safety`` (ControlArena logs in,
  a run folder out).

Names are imported lazily from their modules on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "io": ("ScoredSet", "Split", "read_scored_csv", "write_scored_csv", "calib_test_split",
           "synthetic_scored", "write_synthetic_run", "resolve_run"),
    "guarantees": ("CertifiedThreshold", "ThresholdsReport", "certify_far", "certify_mr",
                   "clopper_pearson", "cp_lower", "cp_upper", "samples_needed",
                   "thresholds_run"),
    "uncertainty": ("Interval", "IntervalTable", "bootstrap_intervals"),
    "prevalence": ("PrevalenceReport", "at_prevalence", "prevalence_report",
                   "reweight_to_prevalence"),
    "policies": ("ACTIONS", "PolicyDesign", "PolicyStats", "CoverageRiskCurve",
                 "InfeasiblePolicyError", "coverage_risk_curve", "design_policy",
                 "evaluate_policy", "optimize_budget", "optimize_cost"),
    "policy_file": ("Policy", "apply_policy", "load_policy", "policy_from_design",
                    "save_policy"),
    "escalation": ("apply_policy_file", "escalate_run"),
    "cascade": ("CascadeDesign", "CascadeStats", "align_stages", "design_cascade",
                "evaluate_cascade"),
    "control_safety": ("ControlSafety", "control_safety"),
    "control_run": ("SafetyRun", "control_safety_run", "read_safety"),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'calimon.deploy' has no attribute {name!r}")
    return getattr(import_module(f"calimon.deploy.{_WHERE[name]}"), name)


def __dir__() -> list[str]:
    return __all__
