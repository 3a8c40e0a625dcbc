"""calimon inside Inspect Scout (calimon.integrations.scout): a Scout scan of an Inspect log with
the calimon scanner, and a Scout validation set turned into a calimon benchmark that `calimon
curve` reads. The log is written by Inspect itself (the mock coding agent of test_inspect_log);
every figure is checked against `calimon score` on the same log."""

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
    calimon_score,
    isolate_inspect,
    write_map,
)
from test_inspect_log import MOCK, _policy, _task  # noqa: E402

N = 10


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_qwen3):
    """An Inspect log of N samples (odd ones hard-code the answer: scorer value "I"), a map
    for the monitor, and `calimon score`'s readings of the log."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    from calimon.integrations import LocalMonitor

    root = tmp_path_factory.mktemp("scout-integration")
    with pytest.MonkeyPatch.context() as mp:
        isolate_inspect(mp, root)
        mp.chdir(root)
        task = _task()
        task.dataset = task.dataset[:N]
        [log] = inspect_eval(task, model=get_model(MOCK, custom_outputs=_policy),
                             log_dir=str(root / "logs"), display="none")
        assert log.status == "success", log.error
        prov = LocalMonitor.from_model(MODEL).provenance
        cmap = write_map(root / "platt.json", prov)
        ref = calimon_score(log.location, root / "s.sqlite", root / "ref.jsonl")
        yield {"root": root, "log": log, "map": cmap, "ref": ref}


def _scan(world, scanner, name, **kwargs):
    from inspect_scout import scan, scan_results_df, transcripts_from

    status = scan([scanner], transcripts_from(world["log"].location),
                  scans=str(world["root"] / name), display="none", max_processes=1,
                  fail_on_error=True, **kwargs)
    assert status.complete
    return scan_results_df(status.location).scanners["monitor_scanner"]


def test_scanner_results_are_calimon_score_s(world):
    import pandas as pd

    from calimon.integrations.scout import monitor_scanner

    df = _scan(world, monitor_scanner(model=MODEL, calibration_map=str(world["root"] /
                                                                        "platt.json")), "scan")
    assert len(df) == N
    uuids = {s.uuid: s for s in world["log"].samples}
    for _, row in df.iterrows():
        meta = json.loads(row["metadata"])
        want = world["ref"][meta["transcript_hash"]]  # calimon score read the same transcript
        assert want["id"].split(":")[1] == uuids[row["transcript_id"]].id
        assert abs(meta["p_raw"] - want["p_raw"]) < TOL and meta["status"] == "ok"
        p_cal = float(world["map"].predict(np.array([want["p_raw"]]))[0])
        assert abs(row["value"] - p_cal) < TOL and abs(meta["p_cal"] - p_cal) < TOL
        assert row["value_type"] == "number" and pd.isna(row["answer"])  # no policy
        assert meta["provenance"]["calibration"] == "platt"
        assert row["explanation"].startswith(f"calimon: calibrated P(misbehavior) {p_cal:.3f}")


def test_scanner_references_the_messages_of_its_spans(world, smol):
    """The shipped probe bundle on SmolLM2: the result's references are the messages its
    evidence spans fall in, by the log's message ids."""
    from calimon.integrations.scout import monitor_scanner

    df = _scan(world, monitor_scanner(model="smollm2-135m", readout="probe:amb-open-monitor"),
               "scan-spans", limit=2)
    ref = calimon_score(world["log"].location, world["root"] / "smol.sqlite",
                        world["root"] / "smol.jsonl", "--readout", "probe:amb-open-monitor",
                        model="smollm2-135m")
    samples = {s.uuid: s for s in world["log"].samples}
    for _, row in df.iterrows():
        meta = json.loads(row["metadata"])
        want = ref[meta["transcript_hash"]]
        assert abs(meta["p_raw"] - want["p_raw"]) < TOL
        assert [(x["start"], x["end"]) for x in meta["token_spans"]] == \
            [(x[0], x[1]) for x in want["extra"]["spans"]]
        assert [(x["start"], x["end"]) for x in meta["spans"]] == \
            [(x[0], x[1]) for x in want["extra"]["segments"]] and meta["spans"]
        messages = samples[row["transcript_id"]].messages
        refs = json.loads(row["message_references"])
        span_ids = [m["id"] for x in meta["spans"] for m in x["messages"]]
        assert [r["id"] for r in refs] == list(dict.fromkeys(span_ids))
        for r in refs:
            [i] = [k for k, m in enumerate(messages) if m.id == r["id"]]
            assert r["cite"] == f"[M{i}]" and r["cite"] in row["explanation"]  # 0-based


def test_a_validation_set_becomes_a_calimon_curve(world):
    """The validation set (a target per transcript id, from the task's own scorer) as a
    benchmark: `calimon curve` reads it with those labels and the scanner's raw scores."""
    from inspect_scout import ValidationCase, ValidationSet
    from typer.testing import CliRunner

    from calimon.cli import app
    from calimon.integrations.scout import validation_benchmark

    root, log = world["root"], world["log"]
    targets = {s.uuid: s.scores["hardcoded"].value == "I" for s in log.samples}
    vs = ValidationSet(cases=[ValidationCase(id=u, target=t) for u, t in targets.items()])
    bench = validation_benchmark(vs, [log.location], root / "validation.jsonl")
    rows = [json.loads(x) for x in bench.read_text().splitlines()]
    assert {r["meta"]["scout"]["transcript_id"]: r["label"] for r in rows} == targets
    run = root / "curve"
    res = CliRunner().invoke(app, ["curve", "--model", MODEL, "--benchmark", str(bench),
                                   "--no-binary", "--n-boot", "10", "--threads", "1",
                                   "--store", str(root / "s.sqlite"), "--out", str(run),
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    with (run / "curve.csv").open() as fh:
        curve = {r["id"]: r for r in csv.DictReader(fh)}
    by_id = {r["id"]: r for r in world["ref"].values()}  # calimon score of the log itself
    assert set(curve) == set(by_id) and len(curve) == N
    for r in rows:
        c = curve[r["id"]]
        assert (c["label"] in ("1", "True", "true")) == r["label"]
        assert abs(float(c["p_raw"]) - by_id[r["id"]]["p_raw"]) < TOL


def test_validation_errors_name_the_case(world):
    from inspect_scout import ValidationCase, ValidationSet

    from calimon.errors import InputError
    from calimon.integrations.scout import validation_benchmark

    root, log = world["root"], world["log"]
    with pytest.raises(InputError, match="validation case 'nope' names no transcript"):
        validation_benchmark(ValidationSet(cases=[ValidationCase(id="nope", target=True)]),
                             [log.location], root / "x.jsonl")
    uuid = log.samples[0].uuid
    with pytest.raises(InputError, match=f"case '{uuid}': target 'maybe' is not a label"):
        validation_benchmark(ValidationSet(cases=[ValidationCase(id=uuid, target="maybe")]),
                             [log.location], root / "x.jsonl")
