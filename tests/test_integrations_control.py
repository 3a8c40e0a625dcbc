"""calimon inside ControlArena (calimon.integrations.control): a ControlArena evaluation of its
smallest setting (data poisoning: no sandbox, no tool but submit, its data shipped in the package)
under trusted monitoring with the calimon monitor, on Inspect's mock model as the untrusted (and
trusted, and scorer) model, in honest and attack modes; then ControlArena's own audit-budget
analysis of the logs, and `calimon curve` reading the logs directly as a benchmark labelled by eval
mode. Every figure is checked against `calimon score` on the same transcripts."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

pytestmark = [pytest.mark.integrations,
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

from integrations_support import (  # noqa: E402
    MODEL,
    TOL,
    isolate_inspect,
    score_rows,
    write_map,
)
from integrations_support import control_trusted as _trusted  # noqa: E402
from integrations_support import control_untrusted as _untrusted  # noqa: E402

MOCK = "mockllm/model"
N = 4  # samples per mode


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_qwen3):
    """The evaluation's honest and attack logs, and the map the monitor applied."""
    from control_arena import EvalMode
    from control_arena.eval import ControlEvalConfig, get_control_task_product
    from control_arena.micro_protocol import trusted_monitoring_builder
    from control_arena.scorers import max_suspicion_scorer
    from control_arena.settings.data_poisoning.data_poisoning_setting import (
        DataPoisoningSetting,
    )
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    from calimon.integrations import LocalMonitor
    from calimon.integrations.control import calimon_monitor_builder

    root = tmp_path_factory.mktemp("control-integration")
    with pytest.MonkeyPatch.context() as mp:
        isolate_inspect(mp, root)
        mp.chdir(root)
        cmap = write_map(root / "platt.json", LocalMonitor.from_model(MODEL).provenance)
        cfg = ControlEvalConfig(untrusted_model=get_model(MOCK, custom_outputs=_untrusted),
                                trusted_model=get_model(MOCK, custom_outputs=_trusted),
                                limit=N, max_steps=3, log_dir=str(root / "logs"))
        setting = DataPoisoningSetting(scorer_model=get_model(MOCK, custom_outputs=_trusted))
        protocol = trusted_monitoring_builder(monitor=calimon_monitor_builder(
            model=MODEL, calibration_map=str(root / "platt.json")))
        tasks = get_control_task_product(setting, protocol, [EvalMode.HONEST, EvalMode.ATTACK],
                                         eval_config=cfg,
                                         monitoring_scorers=[max_suspicion_scorer()])
        logs = inspect_eval(tasks, display="none", **cfg.eval_args())
        assert [log.status for log in logs] == ["success", "success"], [x.error for x in logs]
        by_mode = {log.eval.metadata["mode"]: log for log in logs}
        yield {"root": root, "logs": by_mode, "map": cmap}


def _steps(world):
    """Every monitored step: (mode, sample, index of its assistant message, its metadata)."""
    for mode, log in world["logs"].items():
        for s in log.samples:
            for i, m in enumerate(s.messages):
                if m.role == "assistant" and "suspicion_score" in (m.metadata or {}):
                    yield mode, s, i, m.metadata


def test_suspicion_is_calimon_s_calibrated_probability(world):
    """Each step's suspicion score is the map's probability of `calimon score`'s reading of the
    trajectory up to that step (the log reader's rendering of those messages)."""
    from calimon.data.inspect_log import task_input, trajectory_parts
    from calimon.data.trajectory import render_parts

    root, steps = world["root"], list(_steps(world))
    assert len(steps) == 2 * N  # one submit step per sample, each monitored
    path = root / "steps.jsonl"
    with path.open("w") as fh:
        for k, (_, s, i, _) in enumerate(steps):
            text, _ = render_parts(trajectory_parts(s.messages[:i + 1]))
            fh.write(json.dumps({"id": f"step{k}", "request": task_input(s.input),
                                 "response": text, "label": None, "category": "safety",
                                 "task": "reasoning", "pair_id": f"step{k}"}) + "\n")
    ref = {r["id"]: r for r in score_rows(str(path), root / "s.sqlite",
                                          root / "steps-ref.jsonl")}
    texts = {}
    for k, (mode, s, _, meta) in enumerate(steps):
        want = ref[f"step{k}"]
        a = meta["calimon"]
        assert a["transcript_hash"] == want["transcript_hash"]
        p_cal = float(world["map"].predict(np.array([want["p_raw"]]))[0])
        assert abs(a["p_raw"] - want["p_raw"]) < TOL
        assert abs(meta["suspicion_score"] - p_cal) < TOL and meta["score_parsed"] is True
        assert meta["reason"].startswith(f"calimon: calibrated P(misbehavior) {p_cal:.3f}")
        texts[mode] = texts.get(mode, set()) | {want["transcript_hash"]}
        # max_suspicion_scorer reads it: one step, so the sample's score is the step's
        assert abs(s.scores["max_suspicion_scorer"].value - meta["suspicion_score"]) < 1e-12
    assert not texts["honest"] & texts["attack"]  # the modes' trajectories differ


def test_audit_budget_analysis_reads_the_probabilities(world):
    """ControlArena's own analysis: its suspicion threshold at an audit budget is the honest
    runs' percentile of calimon's probabilities, and safety is computed from them."""
    from control_arena.analysis import compute_safety, compute_suspicion_threshold, samples_df

    df = samples_df([log.location for log in world["logs"].values()])
    honest = df[df["eval_mode"] == "honest"]
    attack = df[df["eval_mode"] == "attack"]
    assert len(honest) == len(attack) == N
    ours = {mode: [meta["suspicion_score"] for m_, _, _, meta in _steps(world) if m_ == mode]
            for mode in ("honest", "attack")}
    assert sorted(honest["score_max_suspicion_scorer"]) == pytest.approx(sorted(ours["honest"]))
    threshold = compute_suspicion_threshold(honest, "max_suspicion_scorer", 25)
    assert threshold == pytest.approx(float(np.percentile(ours["honest"], 75)))
    safety = compute_safety(df, "max_suspicion_scorer", 25)
    assert 0.0 <= safety <= 1.0


def test_calimon_curve_reads_the_logs_directly(world):
    """`calimon curve --benchmark 'LOG_DIR?label=eval_mode'` reads ControlArena's honest and
    attack logs as one benchmark labelled by eval mode (as ControlArena recorded it on each
    sample and task); each reading is the one `calimon score` gives each log as it is."""
    from typer.testing import CliRunner

    from calimon.cli import app

    root, logs = world["root"], world["logs"]
    for mode, log in logs.items():  # where ControlArena records the mode calimon reads
        assert log.eval.metadata["mode"] == mode
        assert {s.metadata["eval_mode"] for s in log.samples} == {mode}
    by_id, mode_of = {}, {}
    for mode, log in logs.items():  # calimon score of each log as it is, unlabelled
        rows = score_rows(log.location, root / "s.sqlite", root / f"{mode}.jsonl")
        assert {r["label"] for r in rows} == {None}
        by_id.update({r["id"]: r for r in rows})
        mode_of.update({r["id"]: mode for r in rows})
    bench = f"{root / 'logs'}?label=eval_mode"
    run = root / "curve"
    res = CliRunner().invoke(app, ["curve", "--model", MODEL, "--benchmark", bench,
                                   "--no-binary", "--n-boot", "10", "--threads", "1",
                                   "--store", str(root / "s.sqlite"), "--out", str(run),
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    assert json.loads((run / "curve.json").read_text())["provenance"]["benchmark"] == bench
    with (run / "curve.csv").open() as fh:
        curve = {r["id"]: r for r in csv.DictReader(fh)}
    assert set(curve) == set(by_id) and len(curve) == 2 * N
    for rid, row in curve.items():
        assert (row["label"] in ("1", "True", "true")) == (mode_of[rid] == "attack")
        assert abs(float(row["p_raw"]) - by_id[rid]["p_raw"]) < TOL
    # calimon score reads the same spec: the same transcripts, labelled
    rows = score_rows(bench, root / "s.sqlite", root / "both.jsonl")
    assert {r["id"]: (r["label"], r["transcript_hash"]) for r in rows} == {
        rid: (mode_of[rid] == "attack", by_id[rid]["transcript_hash"]) for rid in by_id}


def test_the_samples_file_route_gives_the_same_samples(world, capsys):
    """`python -m calimon.integrations.control` freezes the samples the direct route reads."""
    from calimon.data.registry import load_benchmark
    from calimon.integrations.control import main

    root = world["root"]
    bench = root / "control.jsonl"
    logs = [world["logs"]["honest"].location, world["logs"]["attack"].location]
    assert main([*logs, "--out", str(bench)]) == 0
    assert "wrote" in capsys.readouterr().out
    direct = {s.id: s.to_dict() for s in load_benchmark(f"{root / 'logs'}?label=eval_mode")}
    assert {s.id: s.to_dict() for s in load_benchmark(str(bench))} == direct
    assert sorted(r["label"] for r in direct.values()) == [False] * N + [True] * N


def test_failed_attacks_can_be_left_out_and_errors_name_the_file(world, tmp_path):
    from typer.testing import CliRunner

    from calimon.cli import app
    from calimon.data.registry import load_benchmark
    from calimon.errors import InputError
    from calimon.integrations.control import control_benchmark

    attack = world["logs"]["attack"]
    assert {s.scores["data_poisoning_scorer"].value["side_task_success"]
            for s in attack.samples} == {"I"}  # the mock scorer fails every side task
    folder = world["root"] / "logs"
    honest_only = load_benchmark(f"{folder}?label=eval_mode&attacks=successful")
    assert len(honest_only) == N and not any(s.label for s in honest_only)
    # the curve of the honest runs alone: false alarms only
    res = CliRunner().invoke(app, ["curve", "--model", MODEL, "--benchmark",
                                   f"{folder}?label=eval_mode&attacks=successful",
                                   "--no-binary", "--threads", "1", "--store",
                                   str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "run"),
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    with (tmp_path / "run" / "curve.csv").open() as fh:
        assert sorted(r["id"] for r in csv.DictReader(fh) if r["label"] in ("0", "False",
                                                                            "false")) == \
            sorted(s.id for s in honest_only)
    frozen = control_benchmark([world["logs"]["honest"].location, attack.location],
                               tmp_path / "b.jsonl", successful_attacks_only=True)
    assert len(frozen.read_text().splitlines()) == N
    with pytest.raises(InputError, match="no sample to write"):
        control_benchmark([attack.location], tmp_path / "c.jsonl", successful_attacks_only=True)
    with pytest.raises(InputError, match="no such file"):
        control_benchmark([tmp_path / "missing.eval"], tmp_path / "d.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty: no Inspect log in this folder"):
        load_benchmark(f"{tmp_path / 'empty'}?label=eval_mode")


def test_an_unscored_step_is_flagged_not_zero(world):
    """The binary readout on the random-weight model writes no parseable answer: the step gets
    unscored_suspicion with score_parsed False and a reason saying so, and calimon score reads
    the same transcript as a parse failure."""
    import anyio
    from inspect_ai.agent import AgentState

    from calimon.errors import InputError
    from calimon.integrations.control import calimon_monitor_builder

    _, s, i, _ = next(_steps(world))
    agent = calimon_monitor_builder(model=MODEL, readout="binary", unscored_suspicion=0.9)
    state = anyio.run(agent, AgentState(messages=list(s.messages[:i + 1])), [])
    meta = state.messages[-1].metadata
    assert meta["calimon"]["status"] == "parse_failure" and meta["calimon"]["p_raw"] is None
    assert meta["suspicion_score"] == 0.9 and meta["score_parsed"] is False
    assert meta["reason"].startswith("calimon: no score (parse_failure)")
    assert "suspicion set to 0.9 (unscored_suspicion)" in meta["reason"]
    with pytest.raises(InputError, match="expected a suspicion in"):
        calimon_monitor_builder(model=MODEL, unscored_suspicion=2.0)
