"""`.ci/run` itself: each step's wall time in a table, and one clear line once the run passes
its budget (CI_BUDGET_S, 70 minutes by default), found by us long before CI's hard limit."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _stub_checkout(tmp_path: Path) -> Path:
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "Makefile").write_text("setup:\n\t@echo stub setup\n")
    (tmp_path / "tests").mkdir()
    return tmp_path / ".ci" / "run"


def test_a_run_over_its_budget_stops_with_one_line_and_the_table(tmp_path):
    script = _stub_checkout(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "CI_BUDGET_S"}
    r = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                       env={**env, "CI_BUDGET_S": "-1"}, timeout=60)
    assert r.returncode == 1
    failed = [ln for ln in r.stderr.splitlines() if ln.startswith("ci: FAILED:")]
    assert len(failed) == 1 and "over its budget of -1 s" in failed[0], r.stderr
    assert "ci: step | wall s | result" in r.stdout
    assert "install default lock (requirements/default.txt) |" in r.stdout
    assert "make test" not in r.stdout  # nothing ran after the budget was passed


def test_the_default_budget_is_85_minutes_under_ci_s_hard_90():
    text = (ROOT / ".ci" / "run").read_text()
    assert "BUDGET_S=${CI_BUDGET_S:-5100}" in text
