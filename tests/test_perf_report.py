"""The throughput report's arithmetic: fractions of the peak of the same round, ratios taken
within a round, medians over rounds (benchmarks/perf/report.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "perf"))

import report  # noqa: E402


def _peak(rnd: int, gflops: float) -> dict:
    return {"case": {"name": "matmul", "round": rnd}, "gflops_wall": gflops,
            "gflops_per_cpu_s": gflops / 2, "threads": 2,
            "shapes": [{"shape": [8, 8, 8]}]}


def _readout(name: str, rnd: int, seconds: float, flops: float = 1e11) -> dict:
    return {"case": {"name": name, "round": rnd}, "samples": 10, "seconds": seconds,
            "cpu_seconds": 2 * seconds, "model_seconds": seconds,
            "model_cpu_seconds": 2 * seconds, "prompt_tokens": 5000,
            "generated_tokens": 0, "flops": flops, "peak_rss_tree_mb": 1000.0 + rnd}


def _results():
    # round 2 is a slow spell: every case takes twice as long, the peak halves
    out = []
    for rnd, slow in ((1, 1.0), (2, 2.0), (3, 1.0)):
        out += [_peak(rnd, 200.0 / slow), _readout("a-direct", rnd, 10.0 * slow, 2e11),
                _readout("b-verdict", rnd, 4.0 * slow)]
    return out


def test_fractions_of_the_peak_use_the_peak_of_the_same_round():
    rounds = report._rounds(_results())
    per_round = report.round_rates(rounds, "b-verdict")
    # 1e11 FLOP in 4 s = 25 GFLOP/s against 200; in the slow round 12.5 against 100
    assert [round(per_round[k]["peak_wall"], 6) for k in (1, 2, 3)] == [0.125] * 3


def test_ratios_are_taken_within_a_round_and_their_median_reported():
    rounds = report._rounds(_results())
    by_round = {n: report.round_rates(rounds, n) for n in ("a-direct", "b-verdict")}
    ratios = report._within_rounds(by_round, "b-verdict", "a-direct", "sps_wall")
    assert ratios == pytest.approx([2.5, 2.5, 2.5])
    text = report.render({"command": "x", "date": "d", "cpu": "c", "cores": 2, "python": "3",
                          "versions": {}}, _results())
    assert "| (b) >= 3x samples/s of a-direct | 2.5x (rounds: 2.5, 2.5, 2.5)" in text
    assert "3 interleaved rounds" in text
    # the median round's peak is the one quoted, with every round's value
    assert "200.0 GFLOP/s wall" in text and "by round: 200.0, 100.0, 200.0" in text


def test_a_failed_round_is_left_out_not_counted_as_zero():
    results = _results()
    results[4] = {"case": {"name": "a-direct", "round": 2}, "error": "boom"}
    rounds = report._rounds(results)
    assert sorted(report.round_rates(rounds, "a-direct")) == [1, 3]
    by_round = {n: report.round_rates(rounds, n) for n in ("a-direct", "b-verdict")}
    assert len(report._within_rounds(by_round, "b-verdict", "a-direct", "sps_wall")) == 2


def test_median_ignores_missing_values_and_averages_an_even_count():
    assert report._median([3.0, None, 1.0, 2.0, 10.0]) == 2.5
    assert report._median([None]) is None
