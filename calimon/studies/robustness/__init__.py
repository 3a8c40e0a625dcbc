"""Adversarial transcripts and the flip-rate study (see docs/reliability.md).

- ``attacks``: ``ATTACKS``, ``attack_sample``, ``attack_all``, ``insert_text``.
- ``flips``: ``flip_stats``, ``shift_stats`` (pure functions on paired clean/attacked scores).
- ``study``: ``RobustnessSettings``, ``run_robustness`` (through the run store).
- ``report``: ``to_markdown``.
"""

from __future__ import annotations

from calimon.studies.robustness.attacks import ATTACKS, attack_all, attack_sample, insert_text
from calimon.studies.robustness.flips import FlipStats, ShiftStats, flip_stats, shift_stats

__all__ = ["ATTACKS", "FlipStats", "ShiftStats", "attack_all", "attack_sample", "flip_stats",
           "insert_text", "shift_stats"]
