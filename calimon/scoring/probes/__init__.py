"""Probe heads on hidden states: capture, features cache, sequence and token heads, artifacts.

Heavy imports (torch, transformers) happen only inside the functions that need them.
"""

from __future__ import annotations

from calimon.scoring.probes.artifacts import (
           HeadCard,
           HeadMismatchError,
           list_heads,
           load_head,
           save_head,
)
from calimon.scoring.probes.capture import POOLINGS, Captured, CaptureSpec
from calimon.scoring.probes.head import ProbeHead
from calimon.scoring.probes.labels import token_labels

__all__ = ["POOLINGS", "CaptureSpec", "Captured", "HeadCard", "HeadMismatchError", "ProbeHead",
           "list_heads", "load_head", "save_head", "token_labels"]
