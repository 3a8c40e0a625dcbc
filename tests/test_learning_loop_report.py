"""benchmarks/learning_loop: the pages count a target as met exactly as the issue states it (MR
at FAR <= 5% at most half of recalibration only's, within 200 labels; never worse beyond the
paired interval), and the ceiling page counts the sources each reference head halves."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "benchmarks" / "learning_loop"
STUDY_MODULES = ("capture", "ceiling", "report", "run", "selection", "study")


def _load(name: str, monkeypatch):
    """A module of the study folder (its scripts import each other by bare name, and other
    benchmark folders have a ``report`` too): imported with those names cleared, then
    sys.modules and sys.path left as they were."""
    monkeypatch.syspath_prepend(str(HERE))
    before = {m: sys.modules.pop(m) for m in STUDY_MODULES if m in sys.modules}
    try:
        return importlib.import_module(name)
    finally:
        for m in STUDY_MODULES:
            sys.modules.pop(m, None)
        sys.modules.update(before)


def _row(order, labels, mr, recal_mr, diff=(0.0, 0.0)):
    return {"order": order, "labels": labels, "mr": mr, "recal_mr": recal_mr,
            "mr_diff_ci": list(diff)}


def test_targets_read_halving_against_recalibration_and_worse_only_beyond_the_interval(
        monkeypatch):
    report = _load("report", monkeypatch)
    fold = {"rows": [_row("planner", 0, 0.8, 0.8),
                     _row("planner", 25, 0.5, 0.8, (0.05, 0.30)),  # worse beyond: 0.05 > 0
                     _row("planner", 50, 0.41, 0.8, (-0.5, 0.1)),  # 0.41 > 0.40: not halved
                     _row("planner", 100, 0.40, 0.8, (-0.6, 0.0)),  # exactly half: halved
                     _row("planner", 200, 0.2, 0.8, (-0.7, -0.4)),
                     _row("uniform", 0, 0.8, 0.8),
                     _row("uniform", 200, float("nan"), 0.8, (-0.1, 0.0))]}
    planner = report.targets(fold, "planner")
    assert planner == {"before": 0.8, "halved_at": 100, "worse_at": [25]}
    # an undefined MR never counts as halved; an interval touching 0 is not "worse"
    assert report.targets(fold, "uniform") == {"before": 0.8, "halved_at": None, "worse_at": []}


def test_the_ceiling_page_counts_each_reference_against_half_the_monitor(monkeypatch):
    ceiling = _load("ceiling", monkeypatch)

    def head(mr, layer):
        return {"auroc": 0.9, "mr": mr, "layer": layer,
                "ci": {"auroc_ci": [0.8, 0.95], "mr_ci": [0.1, 0.6]}}

    rows = [{"source": "a", "monitor": {"auroc": 0.6, "mr": 0.8},
             "source_only": head(0.41, 3), "in_source": head(0.40, "3 max")},
            {"source": "b", "monitor": {"auroc": 0.6, "mr": 0.6},
             "source_only": head(0.2, 5), "in_source": head(0.31, "7 mean")}]
    page = ceiling.to_markdown({"command": "c", "seconds": 1.0, "model": "m",
                                "max_input_tokens": 1024, "rows": rows})
    assert ("Source only reaches half the monitor's MR on 1 of 2 sources; the in-source "
            "reference reaches half the monitor's MR on 1 of 2 sources.") in page
    assert "| a | 0.800 | 0.400 | 3, 0.900 [0.80, 0.95], 0.410 [0.10, 0.60] | 3 max," in page


def test_the_recipe_section_counts_the_reference_gap_and_the_paired_interval(monkeypatch):
    report = _load("report", monkeypatch)

    def row(order, auroc, diff):
        return {"order": order, "labels": 200, "labels_pos": 90, "recipe": "logistic 11 max",
                "recipe_seconds": 6.0, "recipe_candidates": 99, "auroc": auroc,
                "today": {"recipe": "logistic 15 mean", "auroc": 0.6,
                          "auroc_diff_ci": list(diff)}}

    doc = {"folds": [{"fold": "cyberseceval", "rows": [row("planner", 0.86, (0.1, 0.3)),
                                                       row("uniform", 0.85, (0.1, 0.3))]},
                     {"fold": "gsm8k", "rows": [row("planner", 0.60, (-0.2, 0.1)),
                                                row("uniform", 0.62, (-0.2, 0.1))]},
                     {"fold": "mbpp", "rows": [row("planner", 0.5, (-0.3, -0.01))]}],
           "reference": {"cyberseceval": {"auroc": 0.897}, "gsm8k": {"auroc": 0.657}}}
    page = "\n".join(report.recipe_section(doc))
    # cyberseceval: 0.85 >= 0.897 - 0.05 in both orders; gsm8k's planner 0.60 < 0.607
    assert "both orders: 1 of 3 of cyberseceval, gsm8k, sven (cyberseceval)." in page
    assert "beyond the paired interval (the AUROC difference's interval below 0): mbpp " \
           "(planner)." in page
    assert "| gsm8k | planner | logistic 11 max | 0.600 | logistic 15 mean: 0.600 | " \
           "[-0.20, 0.10] | 0.657 | no |" in page
    assert "median 0.061 s per candidate" in page
