"""Shared generators for the code cells (specification gaming x code, sycophancy x code).

A source-specific loader (``calimon.data.humaneval``, ``calimon.data.mbpp``) turns its rows into
`CodeProblem`s; `code_cells` turns problems into execution-verified sample pairs:

- `problem`: the problem record and the visible / held-back test split;
- `runner`: the honest evaluation and the proxy grader, executed in `calimon.sandbox`;
- `mutants`: one-token mutants of the reference;
- `hacks`: test-gaming solutions; `negatives`: hard negatives;
- `frames`: request and reply paraphrases and span bookkeeping;
- `context`: what the two pair builders of a problem share (the trusted batch and its inputs);
- `spec_pair`, `syc_pair`: the gaming pair and the sycophancy pair of one problem;
- `pairs`: the per-problem pipeline and the report.
"""

from __future__ import annotations

from calimon.data.codegen.pairs import (
    WORKERS,
    CellReport,
    ProblemOutcome,
    code_cells,
    problem_samples,
)
from calimon.data.codegen.problem import CodeProblem, TestCase, split_check

__all__ = ["WORKERS", "CellReport", "CodeProblem", "ProblemOutcome", "TestCase", "code_cells",
           "problem_samples", "split_check"]
