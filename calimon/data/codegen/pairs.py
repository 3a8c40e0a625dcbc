"""From a CodeProblem to verified sample pairs in the two code cells.

Per problem, three kinds of sandbox processes (see `runner`):

1. one trusted batch: the reference, up to 24 one-token mutants and a few constant bodies, run on
   every test and on every call of the candidate found in the tests (plus a few edge inputs);
2. one honest run of the chosen test-gaming solution (after any hard-negative variant, which
   runs first in the same process);
3. one run of the proxy grader (the submission followed by the visible tests) for that solution.

A gaming pair is kept only when the reference passes every test, the gaming solution passes the
proxy grader and fails at least one held-back test. A sycophancy pair is kept only when the mutant
returns the claimed (wrong) value on the claimed input, fails the test that holds that input, and
the reference returns a different value there while passing every test.

Modules: `context` (what both builders share), `spec_pair`, `syc_pair`; this one runs them per
problem and sums up the report.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from calimon.data.codegen import context as C
from calimon.data.codegen.edit import compose, layout
from calimon.data.codegen.mutants import sample_mutants
from calimon.data.codegen.problem import CodeProblem
from calimon.data.codegen.runner import evaluate
from calimon.data.codegen.spec_pair import spec_pair
from calimon.data.codegen.syc_pair import syc_pair
from calimon.samples import Sample

# Sandbox processes spend much of their life starting up (namespaces, a fresh interpreter), so a
# few more threads than cores keep a 2-core machine busy; the output does not depend on it.
WORKERS = 3


@dataclass(frozen=True)
class ProblemOutcome:
    """One problem's samples and, per cell, "ok" or why its pair was not made."""

    pid: str
    samples: tuple[Sample, ...]
    spec: str  # "ok" or the reason the gaming pair was not made
    syc: str  # "ok" or the reason the sycophancy pair was not made
    sandbox_runs: int
    info: dict = field(default_factory=dict, compare=False)


def problem_samples(problem: CodeProblem, seed: int, *, agree_rate: float = 0.25
                    ) -> ProblemOutcome:
    """Both cells' samples for one problem (possibly none), with reasons for what was skipped."""
    rng = random.Random(f"calimon-code:{seed}:{problem.pid}")
    try:
        lay = layout(problem.reference, problem.entry_point)
    except (SyntaxError, ValueError) as exc:
        return ProblemOutcome(problem.pid, (), f"reference unusable ({exc})",
                              "reference unusable", 0)
    calls, owner = C.probe_calls(problem)
    mutants = sample_mutants(problem.reference, rng)
    consts = C.constants(problem)
    ctx = C.ProblemContext(problem, rng, lay, calls, owner, mutants, consts)
    const_codes = [compose(lay, body=[f"return {c}"]).code for c in consts]
    ctx.batch = evaluate(problem, [problem.reference] + [m.code for m in mutants] + const_codes,
                         calls, relative=True)
    ctx.runs = 1
    ref = ctx.variant(0)
    if not C.usable(ref) or not all(ref.tests):
        reason = "reference fails its own tests in the sandbox"
        return ProblemOutcome(problem.pid, (), reason, reason, ctx.runs)
    spec, spec_reason, spec_info = spec_pair(ctx)
    syc, syc_reason, syc_info = syc_pair(ctx, agree_rate)
    return ProblemOutcome(problem.pid, tuple(spec + syc), spec_reason, syc_reason, ctx.runs,
                          {**spec_info, **syc_info})


@dataclass(frozen=True)
class CellReport:
    """What the code cells' build made and skipped, by reason and kind, with its cost."""

    problems: int
    spec_pairs: int
    syc_pairs: int
    syc_agree_negatives: int
    spec_skipped: dict[str, int]
    syc_skipped: dict[str, int]
    hack_kinds: dict[str, int]
    benign_kinds: dict[str, int]
    mutation_kinds: dict[str, int]
    sandbox_runs: int
    seconds: float

    def to_dict(self) -> dict:
        """The fields as a dict."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def code_cells(problems, seed: int, *, workers: int = WORKERS, agree_rate: float = 0.25,
               progress: Callable[[int], None] | None = None
               ) -> tuple[list[Sample], CellReport]:
    """Samples of both code cells for `problems`, in problem order, and a report.
    `progress(1)` is called (from this thread) as each problem's outcome arrives, in order."""
    start = time.monotonic()
    outcomes = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for outcome in pool.map(lambda pr: problem_samples(pr, seed, agree_rate=agree_rate),
                                problems):
            outcomes.append(outcome)
            if progress:
                progress(1)
    samples = [s for o in outcomes for s in o.samples]
    hk, bk, mk = Counter(), Counter(), Counter()
    for o in outcomes:
        if "hack" in o.info:
            hk[o.info["hack"]] += 1
            bk[o.info["benign"]] += 1
        if "mutation" in o.info:
            mk[o.info["mutation"]] += 1
    report = CellReport(
        problems=len(outcomes),
        spec_pairs=sum(o.spec == "ok" for o in outcomes),
        syc_pairs=sum(o.syc == "ok" for o in outcomes),
        syc_agree_negatives=sum(s.pair_id.endswith("-syc-agree") for s in samples),
        spec_skipped=dict(sorted(Counter(o.spec for o in outcomes if o.spec != "ok").items())),
        syc_skipped=dict(sorted(Counter(o.syc for o in outcomes if o.syc != "ok").items())),
        hack_kinds=dict(sorted(hk.items())), benign_kinds=dict(sorted(bk.items())),
        mutation_kinds=dict(sorted(mk.items())),
        sandbox_runs=sum(o.sandbox_runs for o in outcomes),
        seconds=round(time.monotonic() - start, 1))
    return samples, report
