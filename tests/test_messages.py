"""Messages a new user meets first: the version, a mistyped model name, a broken JSONL line."""

from __future__ import annotations

from typer.testing import CliRunner

from calimon import __version__
from calimon.cli import app


def test_version_prints_and_exits():
    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output == f"calimon {__version__}\n"


def test_a_mistyped_model_gets_a_did_you_mean(tmp_path):
    r = CliRunner().invoke(app, ["curve", "--model", "smollm3", "--out", str(tmp_path / "r")])
    assert r.exit_code == 2
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("calimon: error:")]
    assert "unknown model 'smollm3' (did you mean 'smollm2-135m'?)" in line
    r = CliRunner().invoke(app, ["curve", "--model", "zzzz", "--out", str(tmp_path / "r")])
    assert "did you mean" not in r.output and "unknown model 'zzzz'; known: [" in r.output


def test_broken_json_names_the_column_on_its_own_line(tmp_path):
    from calimon.errors import InputError
    from calimon.samples import load_samples

    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "request": "x"\n{"id": "b"}\n')
    try:
        load_samples(path)
    except InputError as exc:
        msg = str(exc)
    assert msg.startswith(f"{path}:1: not valid JSON (Expecting ',' delimiter at column 2")
    assert "at at" not in msg


def test_models_check_warns_when_no_binary_reply_parsed(monkeypatch):
    from calimon.prompts import load_prompt
    from calimon.studies import model_check
    from calimon.verdict import Verdict

    class Unparsed:
        def __init__(self, readout):
            self.readout = readout

        def score(self, samples):
            if self.readout == "binary":
                return [Verdict(s.transcript_hash, "binary", "parse_failure", text="maybe")
                        for s in samples]
            return [Verdict(s.transcript_hash, self.readout, "ok", p_raw=0.2 + 0.1 * i)
                    for i, s in enumerate(samples)]

    monkeypatch.setattr(model_check, "make_monitor", lambda be, tpl, readout: Unparsed(readout))
    _, checks = model_check.score_readouts(None, load_prompt("direct"))
    binary = next(c for c in checks if c.name == "score binary")
    assert binary.status == "WARN" and "no reply parsed" in binary.detail
    assert {c.status for c in checks if c.name != "score binary"} == {"PASS"}


def test_an_empty_benchmark_file_says_so_without_the_inspect_hint(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    r = CliRunner().invoke(app, ["curve", "--benchmark", str(empty), "--out",
                                 str(tmp_path / "r")])
    assert r.exit_code == 2
    assert f"benchmark '{empty}' holds no samples (an empty file?)" in r.output
    assert "Inspect" not in r.output


def test_data_list_says_its_split_columns_count_pairs():
    r = CliRunner().invoke(app, ["data", "list"])
    assert r.exit_code == 0
    head = r.output.splitlines()[0].split()
    assert head[:8] == ["benchmark", "built", "pairs", "samples", "train", "pairs", "calib",
                        "pairs"] and "test" in head


def test_a_run_answered_from_the_store_says_so_first(smol, tmp_path, monkeypatch):
    from conftest import toy_samples

    from calimon.samples import write_samples
    from calimon.scoring.backends import BACKENDS

    monkeypatch.setitem(BACKENDS, "stand-in", "test_engine_ray:StandInBackend")
    bench = write_samples(toy_samples(4), tmp_path / "toy.jsonl")
    args = ["curve", "--model", str(smol.path), "--backend", "stand-in", "--benchmark",
            str(bench), "--no-binary", "--n-boot", "10", "--store", str(tmp_path / "s.sqlite"),
            "--quiet"]
    first = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert first.exit_code == 0 and "reused from the store" not in first.output
    again = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b")])
    assert again.output.splitlines()[0] == ("8 of 8 readings reused from the store; "
                                            "0 model calls")
    more = write_samples(toy_samples(6), tmp_path / "toy.jsonl")  # 4 new transcripts
    part = CliRunner().invoke(app, [*args[:6], str(more), *args[7:], "--out",
                                    str(tmp_path / "c")])
    assert part.output.splitlines()[0].startswith("8 of 12 readings reused from the store; ")


def test_the_test_only_model_is_neither_listed_nor_suggested(tmp_path):
    from calimon.config import config_names
    from calimon.model_listing import list_models
    from calimon.models import load_model_config

    assert "tiny-qwen3" in config_names("models")  # still a config, usable by name
    assert load_model_config("tiny-qwen3").hidden
    assert "tiny-qwen3" not in config_names("models", hidden=False)
    assert "tiny-qwen3" not in {r["name"] for r in list_models()}
    r = CliRunner().invoke(app, ["models", "list"])
    assert r.exit_code == 0 and "smollm2-135m" in r.output and "tiny-qwen3" not in r.output
    for typo in ("tiny-qwen", "qwen3"):  # close to tiny-qwen3: suggested only what users run
        r = CliRunner().invoke(app, ["curve", "--model", typo, "--out", str(tmp_path / "r")])
        (line,) = [ln for ln in r.output.splitlines() if ln.startswith("calimon: error:")]
        assert f"unknown model {typo!r}" in line and "tiny-qwen3" not in line, line
    r = CliRunner().invoke(app, ["curve", "--model", "no/such/dir", "--out", str(tmp_path / "r")])
    assert "smollm2-135m" in r.output and "tiny-qwen3" not in r.output
