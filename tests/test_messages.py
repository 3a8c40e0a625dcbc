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
