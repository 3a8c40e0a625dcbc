"""A policy is self-contained (calimon.deploy.pinned): `calimon escalate` pins the design run's
calibration map and monitor into the policy, and `calimon serve` and the in-process integrations
resolve it with one function, the same from any folder, refusing in one line a pinned piece that
does not match; no other map is ever put in the pinned one's place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from integrations_support import write_map

from calimon.deploy.escalation import escalate_run
from calimon.deploy.io import write_synthetic_run
from calimon.deploy.pinned import pin_policy, resolve_policy
from calimon.deploy.policy_file import load_policy, policy_from_design, save_policy
from calimon.errors import InputError

PROV = {"model": "smollm2-135m", "model_revision": "rev-1", "prompt": "direct",
        "template_hash": "abc123", "readout": "verdict"}


def design_run(folder: Path, provenance: dict = PROV, *, with_map: bool = True) -> Path:
    """A run folder as `calimon curve` leaves it: curve.csv (synthetic rows with a split
    column), curve.json's provenance, and (``with_map``) calibration/platt.json."""
    write_synthetic_run(folder, n_pairs=120)
    (folder / "curve.json").write_text(json.dumps({"provenance": dict(provenance)}))
    if with_map:
        write_map(folder / "calibration" / "platt.json", provenance)
    return folder


def escalate(run: Path, out: Path, provenance: dict = PROV) -> Path:
    escalate_run(run, out, budget=0.2, model=provenance["model"],
                 readout=provenance["readout"], calibration="platt")
    return out


def refusal(call, field: str) -> str:
    with pytest.raises(InputError) as err:
        call()
    msg = str(err.value)
    assert err.value.field == field, msg
    assert "\n" not in msg, msg  # one line
    return msg


def test_escalate_pins_the_map_and_the_policy_resolves_alike_from_any_folder(tmp_path,
                                                                           monkeypatch):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    design_run(work / "runs" / "design")
    monkeypatch.chdir(work)
    escalate(Path("runs/design"), Path("policy.yaml"))  # relative, as a user types it
    policy = work / "policy.yaml"
    seen = []
    for folder in (work, elsewhere, work):
        monkeypatch.chdir(folder)
        r = resolve_policy(policy)
        seen.append((r.stored_map.digest(), r.prompt, r.monitor.model_dump(), r.map_source))
        shutil.rmtree(work / "runs", ignore_errors=True)  # the run is gone after the first
    assert seen[0] == seen[1] == seen[2]
    pinned = load_policy(policy)
    assert pinned.version == 2 and pinned.pin.monitor.template_hash == "abc123"
    assert seen[0][0] == pinned.pin.map_sha256 and pinned.pin.map["method"] == "platt"


def test_each_piece_that_does_not_match_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = design_run(tmp_path / "run")
    policy = escalate(run, tmp_path / "policy.yaml")
    pinned_map = run / "calibration" / "platt.json"
    assert resolve_policy(policy, calibration_map=pinned_map).forced == ()  # the pinned one
    other = tmp_path / "other.json"
    write_map(other, PROV, seed=1)
    assert "not the one the policy pins" in refusal(
        lambda: resolve_policy(policy, calibration_map=other), "calibration_map")
    forced = resolve_policy(policy, calibration_map=other, force=True)
    assert forced.map_source == str(other) and "not the one the policy pins" in forced.forced[0]
    refusal(lambda: resolve_policy(policy, prompt="evidence"), "prompt")
    # a hand edit of the pinned map's parameters breaks its digest
    doc = yaml.safe_load(policy.read_text())
    doc["pin"]["map"]["params"]["a"] += 0.5
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(doc, sort_keys=False))
    refusal(lambda: resolve_policy(edited), "pin.map_sha256")
    # a built monitor of another revision is refused against the pin
    r = resolve_policy(policy)
    assert "model_revision 'rev-1' vs monitor 'rev-2'" in refusal(
        lambda: r.meet({**PROV, "model_revision": "rev-2", "defenses": []}), None)
    assert r.meet({**PROV, "defenses": []}) == []


def test_a_run_without_a_map_gives_a_policy_that_is_never_served_with_another(tmp_path):
    from typer.testing import CliRunner

    from calimon.cli import app

    run = design_run(tmp_path / "run", with_map=False)
    res = CliRunner().invoke(app, ["escalate", str(run), "--budget", "0.2", "--model",
                                   "smollm2-135m", "--readout", "verdict", "--calibration",
                                   "platt", "--out", str(tmp_path / "p.yaml")])
    assert res.exit_code == 0, res.output
    assert "records no calibration map (calibration/platt.json) to pin" in res.output
    assert "calibration/platt.json" in refusal(lambda: resolve_policy(tmp_path / "p.yaml"),
                                               "pin.map")


def test_a_version_1_policy_is_refused_and_pin_policy_migrates_it(tmp_path):
    from calimon.deploy.io import file_sha256

    run = design_run(tmp_path / "run")
    current = load_policy(escalate(run, tmp_path / "new.yaml"))
    old = current.model_copy(update={"version": 1, "pin": None})
    path = save_policy(old, tmp_path / "old.yaml")
    assert "pin: " not in path.read_text()
    msg = refusal(lambda: resolve_policy(path), "version")
    assert f"calimon pin-policy {path} --run" in msg
    # another CSV than the one the policy was designed on is not its design run
    stranger = design_run(tmp_path / "stranger", with_map=False)
    write_synthetic_run(stranger, n_pairs=60)
    assert file_sha256(stranger / "curve.csv") != current.pin.design_run_sha256
    refusal(lambda: pin_policy(path, stranger), "provenance.source_sha256")
    migrated = pin_policy(path, run, tmp_path / "pinned.yaml")
    assert migrated.pin == current.pin
    assert (migrated.t_low, migrated.t_high) == (old.t_low, old.t_high)
    assert resolve_policy(tmp_path / "pinned.yaml").stored_map.digest() == \
        current.pin.map_sha256


def test_a_p_raw_policy_pins_no_map_and_takes_none(tmp_path):
    from calimon.deploy.io import read_scored_csv
    from calimon.deploy.pinned import pin_from_run
    from calimon.deploy.policies import optimize_budget

    run = design_run(tmp_path / "run")
    design = optimize_budget(read_scored_csv(run / "curve.csv", score="p_raw"), 0.2)
    pin = pin_from_run(run / "curve.csv", score="p_raw", calibration="none", run=PROV)
    policy = save_policy(policy_from_design(design, name="raw", readout="verdict",
                                            model="smollm2-135m", calibration="none",
                                            score="p_raw", pin=pin), tmp_path / "raw.yaml")
    r = resolve_policy(policy)
    assert pin.map is None and r.stored_map is None and r.map_source is None
    refusal(lambda: resolve_policy(policy, calibration_map=run / "calibration" / "platt.json"),
            "calibration_map")


# -- one policy, two folders, through the integrations' monitor and the server's ------------

@pytest.mark.model
def test_one_probe_policy_decides_alike_from_two_folders(smol_backend, tmp_path, monkeypatch):
    """The case of a probe readout whose bundle ships its own map: from the folder where the
    design run is, and from one where it is not (or after it is gone), the in-process monitor
    and the server's loaded monitor give the same calibrated score and decision, through the
    pinned map, never the bundle's."""
    from calimon.integrations import LocalMonitor
    from calimon.samples import Sample
    from calimon.serve.loading import ServedMonitor
    from calimon.serve.settings import ServeSettings

    readout = "probe:amb-open-monitor"
    bundle = LocalMonitor.from_model("smollm2-135m", readout=readout)
    prov = {k: bundle.provenance[k] for k in PROV}
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    design_run(work / "runs" / "design", prov)
    monkeypatch.chdir(work)
    (work / "policies").mkdir()  # as configs/policies/: the run is not beside the policy
    policy = escalate(Path("runs/design"), work / "policies" / "p.yaml", prov).resolve()
    sample = Sample(id="s1", request="Write add(a, b).", label=None, category="safety",
                    task="code", pair_id="s1",
                    response="def add(a, b):\n    if (a, b) == (1, 2):\n        return 3\n")
    [verdict] = bundle.readings([sample])
    bundle_p_cal = bundle.calibrate(verdict.p_raw)
    got = []
    for folder in (work, elsewhere):
        monkeypatch.chdir(folder)
        local = LocalMonitor.from_policy(policy)
        [a] = local.assess([sample])
        served = ServedMonitor.load(ServeSettings(policy=policy))
        d = served.decide(verdict, sample.id)
        got.append((a.p_cal, a.decision, a.provenance["calibration_map"], d["p_cal"],
                    d["decision"], served.map_path))
    shutil.rmtree(work / "runs")
    monkeypatch.chdir(work)
    [a] = LocalMonitor.from_policy(policy).assess([sample])
    assert got[0] == got[1]
    assert a.p_cal == got[0][0] and a.decision == got[0][1]
    assert got[0][0] == pytest.approx(got[0][3], abs=1e-6) and got[0][1] == got[0][4]
    assert got[0][0] != pytest.approx(bundle_p_cal, abs=1e-3)  # the pinned map, not the bundle's
    assert got[0][2] == got[0][5] == f"{policy}#pin.map"
