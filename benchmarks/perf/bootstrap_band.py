"""Time the pair-clustered bootstrap band (median of repeated runs).

    python benchmarks/perf/bootstrap_band.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from calimon.numerics.bootstrap import bootstrap_band


def main(n_pairs: int = 1000, n_boot: int = 200, repeats: int = 7) -> None:
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(n_pairs, bool), np.zeros(n_pairs, bool)]
    s = np.clip(rng.normal(0.5 + 0.2 * y, 0.2), 0, 1)
    g = np.r_[np.arange(n_pairs), np.arange(n_pairs)]
    bootstrap_band(s, y, g, n_boot=5)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        bootstrap_band(s, y, g, n_boot=n_boot)
        times.append(time.perf_counter() - start)
    print(f"bootstrap_band: {2 * n_pairs} samples, {n_boot} resamples: "
          f"median {statistics.median(times) * 1000:.1f} ms over {repeats} runs")


if __name__ == "__main__":
    main()
