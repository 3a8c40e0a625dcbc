"""Probe heads on hidden states: capture, features cache, sequence and token heads, artifacts.

Heavy imports (torch, transformers) happen only inside the functions that need them.
"""

from __future__ import annotations

from calimon.heads.artifacts import HeadCard, HeadMismatchError, list_heads, load_head, save_head
from calimon.heads.capture import POOLINGS, Captured, CaptureSpec
from calimon.heads.head import ProbeHead
from calimon.heads.labels import token_labels

__all__ = ["POOLINGS", "CaptureSpec", "Captured", "HeadCard", "HeadMismatchError", "ProbeHead",
           "list_heads", "load_head", "save_head", "token_labels"]
