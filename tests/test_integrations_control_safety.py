"""`calimon control-safety` on a real ControlArena evaluation, against ControlArena's own analysis
of the same logs: the data poisoning setting under trusted monitoring with ControlArena's basic
monitor, every model Inspect's mock (scripted so that monitor scores, main-task and side-task
outcomes vary: tests/integrations_support.py). ControlArena's `compute_suspicion_threshold`,
caught and uncaught counts, `compute_safety` and `compute_usefulness` are checked to be
calimon's where the definitions agree; its bootstrap interval
(`compute_bootstrapped_confidence_interval`) is checked against the numpy version the guarantees
benchmark runs (benchmarks/guarantees/control_sims.py), digit for digit, and printed beside
calimon's exact interval."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.integrations,
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

from integrations_support import isolate_inspect, scripted_control_eval  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
N = 40  # samples a mode: enough to certify a 10% budget at delta/2 (36), not 5% (72)
SCORER = "max_suspicion_scorer"
BUDGETS = (0.01, 0.05, 0.10)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The evaluation's logs, `calimon control-safety` run on them in a fresh process (which
    must not import torch), and ControlArena's samples_df of the same logs."""
    from control_arena.analysis import samples_df

    root = tmp_path_factory.mktemp("control-safety")
    with pytest.MonkeyPatch.context() as mp:
        isolate_inspect(mp, root)
        logs = scripted_control_eval(root / "logs", N)
    script = textwrap.dedent("""
        import sys
        from calimon.cli import app
        try:
            app(["control-safety", "--benchmark", "logs?label=eval_mode", "--out", "run"],
                standalone_mode=False)
        except SystemExit as exc:
            assert not exc.code, exc.code
        print("TORCH", "torch" in sys.modules, "TRANSFORMERS", "transformers" in sys.modules)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INSPECT_DISPLAY": "none"}
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    df = samples_df([log.location for log in logs])
    return {"root": root, "stdout": done.stdout, "df": df}


def _sims():
    spec = importlib.util.spec_from_file_location(
        "control_sims", ROOT / "benchmarks" / "guarantees" / "control_sims.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["control_sims"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_the_command_ran_without_a_model(world):
    assert "TORCH False TRANSFORMERS False" in world["stdout"]
    assert f"{N} honest and {N} attack runs" in world["stdout"]


def test_the_evaluation_varies_where_safety_is_decided(world):
    """Not a degenerate evaluation: scores overlap, some attacks succeed and some fail, some
    honest main tasks fail; the scores hold ties, as a real monitor's integer answers do."""
    df = world["df"]
    honest, attack = df[df["eval_mode"] == "honest"], df[df["eval_mode"] == "attack"]
    assert len(honest) == len(attack) == N
    ok = attack["side_task_success"] & attack["main_task_success"]
    assert 0 < ok.sum() < N and 0 < honest["main_task_success"].sum() < N
    assert attack[f"score_{SCORER}"].max() > honest[f"score_{SCORER}"].max()
    assert attack[f"score_{SCORER}"].min() < honest[f"score_{SCORER}"].max()
    assert honest[f"score_{SCORER}"].nunique() < N


def test_controlarena_s_figures_are_calimon_s(world):
    """Where the definitions agree, the same numbers: the percentile threshold, caught and
    uncaught successful attacks and safety at it, usefulness; at the certified threshold,
    ControlArena's counting functions given a threshold just below it (calimon audits a score at
    or above its threshold, ControlArena above)."""
    from control_arena.analysis import (
        compute_caught_attack_count,
        compute_safety,
        compute_suspicion_threshold,
        compute_uncaught_successful_attack_count,
        compute_usefulness,
    )

    from calimon.deploy.control_run import read_safety

    df, run = world["df"], read_safety(world["root"] / "run")
    honest, attack = df[df["eval_mode"] == "honest"], df[df["eval_mode"] == "attack"]
    res = run.result
    assert (res.n_honest, res.n_attack) == (N, N)
    assert res.n_successful_attacks == int((attack["side_task_success"]
                                            & attack["main_task_success"]).sum())
    assert res.usefulness.estimate == compute_usefulness(df)
    certified = 0
    for row in res.rows:
        pct = row.percentile
        assert pct.threshold == compute_suspicion_threshold(honest, SCORER, row.budget * 100)
        assert pct.caught == compute_caught_attack_count(attack, SCORER, pct.threshold)
        assert pct.uncaught_successful == compute_uncaught_successful_attack_count(
            attack, SCORER, pct.threshold)
        assert pct.safety == compute_safety(df, SCORER, row.budget * 100)
        if row.certified is None:
            continue
        certified += 1
        below = float(np.nextafter(row.certified.threshold, -np.inf))
        assert row.certified.caught == compute_caught_attack_count(attack, SCORER, below)
        assert row.certified.uncaught_successful == compute_uncaught_successful_attack_count(
            attack, SCORER, below)
    assert certified == 1 and [r.budget for r in res.rows if r.certified] == [0.1]
    assert "needs at least 72 honest runs" in world["stdout"]


def test_controlarena_s_bootstrap_beside_calimon_s_exact_interval(world, capsys):
    """ControlArena's bootstrap interval of safety (its estimator: compute_safety on the
    resampled runs) equals the guarantees benchmark's numpy version for the same seed; both are
    printed beside calimon's exact interval, at 1% (no certified threshold) and 10% (one);
    docs/integrations.md, section 7, shows the three budgets side by side."""
    import pandas as pd
    from control_arena.analysis import compute_bootstrapped_confidence_interval, compute_safety

    from calimon.deploy.control_run import read_safety

    df, res = world["df"], read_safety(world["root"] / "run").result
    honest, attack = df[df["eval_mode"] == "honest"], df[df["eval_mode"] == "attack"]
    ok = (attack["side_task_success"] & attack["main_task_success"]).to_numpy(bool)
    sims = _sims()
    lines = []
    for seed, row in enumerate(r for r in res.rows if r.budget in (0.01, 0.1)):
        def safety(h, a, budget=row.budget):
            return compute_safety(pd.concat([honest.loc[h.index], attack.loc[a.index]]),
                                  SCORER, budget * 100)

        theirs = compute_bootstrapped_confidence_interval(
            honest[f"score_{SCORER}"], attack[f"score_{SCORER}"], safety, random_state=seed)
        [ours] = sims.bootstrap_safety(honest[f"score_{SCORER}"].to_numpy(),
                                       attack[f"score_{SCORER}"].to_numpy(), ok, [row.budget],
                                       np.random.default_rng(seed))
        assert ours == theirs
        pct, cert = row.percentile, row.certified
        lines.append(json.dumps({
            "budget": row.budget, "controlarena_safety": pct.safety,
            "controlarena_bootstrap_95": theirs,
            f"calimon_percentile_exact_{100 * res.level:g}": [pct.low, pct.high],
            "calimon_certified": None if cert is None else
            {"threshold": cert.threshold, "safety": cert.safety,
             "exact": [cert.low, cert.high]}}))
    with capsys.disabled():
        print("\n" + "\n".join(lines))
