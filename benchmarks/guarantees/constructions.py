"""Which anytime-valid bound the live status uses: labels needed by each construction.

    python benchmarks/guarantees/constructions.py   # writes benchmarks/results/guarantees-constructions.md

One stratum of ``N`` decisions with ``K`` of the counted kind, a target of at most ``alpha N``,
delta/2 = 0.025 (the level each stratum's bound gets in the live status). For each construction,
the fewest labels whose bound, at the expected count ``round(K m / N)``, is within the target:

- the exact fixed-n hypergeometric bound (valid at one sample size fixed in advance: the floor);
- delta spent over a geometric grid of label counts (``m_j = ceil(10 * 1.2^j)``, weights
  ``proportional to (j + 1)^-1.1``), the exact bound at level ``delta * w_j`` at each grid point,
  read at the last grid point passed: valid at every sample size;
- the prior-posterior-ratio confidence sequence (`calimon.numerics.confseq`) with Jeffreys'
  prior (the one adopted), with Beta(1, 20), and with a mixture over shares.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

from calimon.numerics.confseq import JEFFREYS, Prior, cs_count_upper
from calimon.studies.shift.live import count_upper

CASES = [(1000, 20, 0.05), (1000, 10, 0.05), (5000, 100, 0.05), (5000, 50, 0.05),
         (20000, 200, 0.05), (1000, 40, 0.1), (2000, 30, 0.05), (400, 8, 0.1),
         (1000, 300, 0.5), (2000, 100, 0.1)]
HALF_DELTA = 0.025
MIXTURE = Prior(tuple((m * 12, (1 - m) * 12) for m in (0.005, 0.02, 0.06, 0.15, 0.35, 0.6)))


def _grid(N: int) -> list[int]:
    out, m = [], 10
    while m < N:
        out.append(m)
        m = max(m + 1, math.ceil(m * 1.2))
    return [*out, N]


def grid_upper(k: int, m: int, N: int, delta: float) -> int:
    """The grid construction's bound after ``m`` labels (the last grid point passed)."""
    grid = _grid(N)
    weights = [(j + 1) ** -1.1 for j in range(len(grid))]
    total = sum(weights)
    j = max((i for i, g in enumerate(grid) if g <= m), default=None)
    if j is None:
        return N
    g = grid[j]
    return count_upper(round(k * g / m) if m else 0, g, N, delta * weights[j] / total)


def first(bound, N: int, K: int, alpha: float) -> int | None:
    """The fewest labels at which ``bound`` (at the expected count) is within ``alpha N``."""
    def ok(m: int) -> bool:
        return bound(round(K / N * m), m, N, HALF_DELTA) <= alpha * N

    if not ok(N):
        return None
    return next(m for m in range(1, N + 1) if ok(m))


METHODS = {
    "grid (delta spent over label counts)": grid_upper,
    "confidence sequence, Jeffreys (adopted)": lambda k, m, N, d: cs_count_upper(k, m, N, d),
    "confidence sequence, Beta(1, 20)": lambda k, m, N, d: cs_count_upper(
        k, m, N, d, Prior(((1.0, 20.0),))),
    "confidence sequence, mixture over shares": lambda k, m, N, d: cs_count_upper(
        k, m, N, d, MIXTURE),
}


def main(out: str = "benchmarks/results/guarantees-constructions.md") -> None:
    """Every case and construction, and the median ratio to the fixed-n floor."""
    assert JEFFREYS.components == ((0.5, 0.5),)
    head = "| N | K | target | fixed-n | " + " | ".join(METHODS) + " |"
    lines = ["# Anytime-valid bounds: labels needed by construction", "",
             "Regenerate: `python benchmarks/guarantees/constructions.py` (the docstring says "
             "how each is computed). Each cell: labels until the bound at the expected count "
             "is within the target (ratio to the fixed-n floor in brackets).", "",
             head, "|" + "---|" * (4 + len(METHODS))]
    ratios: dict[str, list[float]] = {name: [] for name in METHODS}
    for N, K, alpha in CASES:
        fixed = first(count_upper, N, K, alpha)
        cells = []
        for name, bound in METHODS.items():
            got = first(bound, N, K, alpha)
            ratios[name].append(got / fixed)
            cells.append(f"{got} ({got / fixed:.2f})")
        lines.append(f"| {N} | {K} | {alpha * N:g} | {fixed} | " + " | ".join(cells) + " |")
    lines += ["", "Median ratio to the fixed-n floor: " + "; ".join(
        f"{name} {statistics.median(r):.2f}" for name, r in ratios.items()) + "."]
    Path(out).write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:])
