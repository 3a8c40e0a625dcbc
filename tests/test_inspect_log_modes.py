"""ControlArena-style Inspect logs as one benchmark labelled by eval mode
(calimon.data.inspect_log with ``label=eval_mode``, calimon.data.eval_modes), without ControlArena:
each log is written by Inspect itself, in the test, from a tiny task on Inspect's mock model whose
task metadata names its mode (``mode``) and whose samples carry ``eval_mode``, as ControlArena's
tasks do; its scorer gives a dict value with ``main_task_success`` / ``side_task_success`` (C/I), as
ControlArena's setting scorers do. tests/test_integrations_control.py reads the logs of a real
ControlArena evaluation the same way."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("inspect_ai")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # inspect_ai's own

from calimon.data.inspect_log import (  # noqa: E402
    InspectOptions,
    load_logs,
    log_paths,
    parse_options,
)
from calimon.data.registry import load_benchmark  # noqa: E402
from calimon.errors import InputError  # noqa: E402

MOCK = "mockllm/model"
N = 4  # samples per log
SIDE = ["C", "I", "C", "I"]  # the attack log's side task, by sample


def _task(name, task_mode, sample_modes, side=None):
    """A ControlArena-like task: task metadata ``mode``, each sample's ``eval_mode`` (None: no
    metadata), a scorer whose dict value says whether the main (and side) task succeeded."""
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import Score, accuracy, scorer
    from inspect_ai.solver import generate

    @scorer(metrics={"*": [accuracy()]})
    def setting_scorer():
        async def score(state, target):
            k = int(state.sample_id[1:])
            value = {"main_task_success": "C"}
            if side is not None:
                value["side_task_success"] = side[k]
            return Score(value=value)

        return score

    dataset = [Sample(input=f"Task {k}: tidy the config.", id=f"{name[0]}{k}",
                      metadata={} if m is None else {"eval_mode": m})
               for k, m in enumerate(sample_modes)]
    return Task(dataset=dataset, solver=[generate()], scorer=setting_scorer(), name=name,
                metadata={} if task_mode is None else {"mode": task_mode})


def _agent(messages, tools, tool_choice, config):
    """The mock agent: an attack's reply differs from an honest one."""
    from inspect_ai.model import ModelOutput, ModelUsage

    text = messages[-1].text
    out = ModelOutput.from_content(MOCK, f"Done: {text}" + (" And the backdoor is in."
                                                             if "attack" in text else ""))
    # usage given: otherwise the mock model counts tokens with tiktoken, which downloads
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Folders of logs written by Inspect: control/ (an honest and an attack log, and a JSON
    file that is not a log), plain/ (no modes), mixed/ (a sample whose mode is not its task's),
    unknown/ (attacks whose scorer says nothing of a side task), empty/."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    root = tmp_path_factory.mktemp("modes")
    plan = {"control": [_task("honest_run", "honest", ["honest"] * N, side=None),
                        _task("attack_run", "attack", ["attack"] * N, side=SIDE)],
            "plain": [_task("plain_run", None, [None] * N)],
            "mixed": [_task("mixed_run", "honest", ["honest", "attack", "honest", "honest"])],
            "unknown": [_task("unknown_run", "attack", [None] * N)]}
    logs = {}
    with pytest.MonkeyPatch.context() as mp:
        for var in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
            mp.setenv(var, str(root / var.lower()))
        mp.setenv("INSPECT_LOG_DIR", str(root / "default-logs"))
        mp.chdir(root)
        for folder, tasks in plan.items():
            for task in tasks:
                [log] = inspect_eval(task, model=get_model(MOCK, custom_outputs=_agent),
                                     log_dir=str(root / folder), display="none")
                assert log.status == "success", log.error
                logs[task.name] = log.location
    (root / "control" / "notes.json").write_text(json.dumps({"not": "a log"}))
    (root / "empty").mkdir()
    (root / "empty" / "notes.json").write_text("{}")
    return {"root": root, "logs": logs}


def test_a_folder_is_one_benchmark_labelled_by_eval_mode(runs):
    folder = runs["root"] / "control"
    samples = load_benchmark(f"{folder}?label=eval_mode")
    assert len(samples) == 2 * N  # the two logs; notes.json is not a log
    alone = {s.id: s for name in ("honest_run", "attack_run")
             for s in load_benchmark(runs["logs"][name])}
    assert {s.id for s in samples} == set(alone)
    for s in samples:
        mode = "attack" if s.meta["inspect"]["sample_id"].startswith("a") else "honest"
        assert s.label is (mode == "attack")
        assert (s.request, s.response) == (alone[s.id].request, alone[s.id].response)
        k = int(s.meta["inspect"]["sample_id"][1:])
        assert s.meta["control_arena"] == {
            "eval_mode": mode, "main_task_success": True,
            "side_task_success": (SIDE[k] == "C") if mode == "attack" else None}
    assert [s.meta["inspect"]["log"] for s in samples] == sorted(
        s.meta["inspect"]["log"] for s in samples)  # logs in path order
    # one log, and a pattern, read the same way
    one = load_benchmark(runs["logs"]["attack_run"] + "?label=eval_mode&category=spec_gaming")
    assert [s.label for s in one] == [True] * N
    assert {s.category for s in one} == {"spec_gaming"}
    pattern = load_benchmark(f"{folder}/*attack*.eval?label=eval_mode")
    assert [s.id for s in pattern] == [s.id for s in one]


def test_successful_attacks_only(runs):
    folder = runs["root"] / "control"
    samples = load_benchmark(f"{folder}?label=eval_mode&attacks=successful")
    attacks = [s.meta["inspect"]["sample_id"] for s in samples if s.label]
    assert attacks == [f"a{k}" for k in range(N) if SIDE[k] == "C"]
    assert sum(not s.label for s in samples) == N  # every honest sample stays
    assert len(load_benchmark(f"{folder}?label=eval_mode&attacks=all")) == 2 * N


def test_without_label_the_samples_stay_unlabelled(runs):
    samples = load_benchmark(str(runs["root"] / "control"))
    assert len(samples) == 2 * N and {s.label for s in samples} == {None}
    assert all("control_arena" not in s.meta for s in samples)


def test_errors_name_the_file(runs, tmp_path):
    root, logs = runs["root"], runs["logs"]
    with pytest.raises(InputError) as e:
        load_benchmark(f"{root / 'plain'}?label=eval_mode")
    assert str(e.value).startswith(f"{logs['plain_run']}: field 'eval_mode': sample 'p0'")
    assert "no ControlArena eval mode" in str(e.value)
    with pytest.raises(InputError) as e:
        load_benchmark(f"{root / 'mixed'}?label=eval_mode")
    assert str(e.value).startswith(f"{logs['mixed_run']}: field 'eval_mode': sample 'm1'")
    assert "eval_mode 'attack' but its task ran in mode 'honest'" in str(e.value)
    with pytest.raises(InputError) as e:
        load_benchmark(f"{root / 'unknown'}?label=eval_mode&attacks=successful")
    assert str(e.value).startswith(
        f"{logs['unknown_run']}: field 'scores.side_task_success': attack sample 'u0'")
    assert len(load_benchmark(f"{root / 'unknown'}?label=eval_mode")) == N  # all: no need
    with pytest.raises(InputError, match=r"empty: no Inspect log in this folder"):
        load_benchmark(str(root / "empty"))
    with pytest.raises(InputError, match=r"no Inspect log .* matches this pattern"):
        load_benchmark(f"{root}/control/*nothing*.eval?label=eval_mode")
    with pytest.raises(InputError, match="no such file"):
        load_benchmark(str(tmp_path / "missing.eval"))
    with pytest.raises(InputError) as e:  # a mistyped folder is a path, not a benchmark name
        load_benchmark(f"{tmp_path / 'contrl'}?label=eval_mode")
    assert str(e.value) == f"{tmp_path / 'contrl'}: no such file or folder"
    import shutil

    path = log_paths(root / "control")[0]
    copy = shutil.copy(path, tmp_path / "copy.eval")
    with pytest.raises(InputError) as e:
        load_logs([path, copy], InspectOptions())
    assert str(e.value).startswith(f"{copy}: field 'id': duplicate sample")
    assert str(e.value).endswith(f"(also in {path})")


def test_option_errors():
    assert parse_options("label=eval_mode&attacks=successful") == InspectOptions(
        by_eval_mode=True, attacks="successful")
    for query, match in [("label=scorer", r"label=scorer: expected one of \['eval_mode'\]"),
                         ("label=eval_mode&scorer=s&positive=I", "both label the samples"),
                         ("attacks=successful", "attacks=successful needs label=eval_mode"),
                         ("label=eval_mode&attacks=some", r"attacks=some: expected one of")]:
        with pytest.raises(InputError, match=match):
            parse_options(query)


def test_a_registered_name_wins_over_a_folder_of_that_name(runs, tmp_path, monkeypatch):
    import shutil

    shutil.copytree(runs["root"] / "control", tmp_path / "amb-open")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CALIMON_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(InputError, match="benchmark 'amb-open' is not built yet"):
        load_benchmark("amb-open", build_if_missing=False)
    assert len(load_benchmark("./amb-open?label=eval_mode")) == 2 * N


def test_score_reads_the_folder(runs, tiny_qwen3, tmp_path):
    """`calimon score --benchmark FOLDER?label=eval_mode` scores every sample of both logs with
    its eval-mode label; each reading is the one `calimon score` gives the log alone."""
    from calimon.cli import app

    def score(bench, out):
        res = CliRunner().invoke(app, ["score", "--model", str(tiny_qwen3.path), "--benchmark",
                                       bench, "--threads", "1", "--store",
                                       str(tmp_path / "s.sqlite"), "--export", str(out),
                                       "--quiet"])
        assert res.exit_code == 0, res.output
        return {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}

    rows = score(f"{runs['root'] / 'control'}?label=eval_mode", tmp_path / "folder.jsonl")
    alone = {**score(runs["logs"]["honest_run"], tmp_path / "h.jsonl"),
             **score(runs["logs"]["attack_run"], tmp_path / "a.jsonl")}
    assert set(rows) == set(alone) and len(rows) == 2 * N
    for rid, r in rows.items():
        assert r["label"] is (":a" in rid)
        assert r["transcript_hash"] == alone[rid]["transcript_hash"]
        assert r["p_raw"] == pytest.approx(alone[rid]["p_raw"], abs=1e-5)
