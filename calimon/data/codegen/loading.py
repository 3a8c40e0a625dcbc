"""From a source file to code-cell samples, shared by the source loaders
(``calimon.data.humaneval``, ``calimon.data.mbpp``): rows -> `CodeProblem`s (each loader's
``to_problem``, which returns a problem or the reason a row cannot be used) -> `code_cells`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from calimon.data.codegen.pairs import WORKERS, CellReport, code_cells
from calimon.data.codegen.problem import CodeProblem
from calimon.data.sources import read_jsonl
from calimon.progress import Progress
from calimon.samples import Sample

ToProblem = Callable[[dict], "CodeProblem | str"]


def load_problems(path: str | Path, to_problem: ToProblem
                  ) -> tuple[list[CodeProblem], dict[str, int]]:
    """The usable problems of a JSONL file, in file order, and {reason: rows skipped}."""
    problems, skipped = [], Counter()
    for row in read_jsonl(path):
        p = to_problem(row)
        if isinstance(p, str):
            skipped[p] += 1
        else:
            problems.append(p)
    return problems, dict(sorted(skipped.items()))


def problems_report(path: str | Path, to_problem: ToProblem, seed: int, *,
                    limit: int | None = None, workers: int = WORKERS,
                    progress: Progress | None = None, label: str = "problems"
                    ) -> tuple[list[Sample], CellReport, dict[str, int]]:
    """Samples of both code cells (no splits) of the first ``limit`` problems of ``path``, the
    pipeline report and the rows skipped before execution. ``progress(label, total)`` returns a
    tick called once per problem verified."""
    problems, skipped = load_problems(path, to_problem)
    if limit is not None:
        problems = problems[:limit]
    tick = progress(label, len(problems)) if progress and problems else None
    samples, report = code_cells(problems, seed, workers=workers, progress=tick)
    return samples, report, skipped
