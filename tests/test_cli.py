import json

from typer.testing import CliRunner

from calimon.cli import app

runner = CliRunner()


def test_curve_with_absent_model_exits_2_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.delenv("CALIMON_MODELS_DIR", raising=False)
    result = runner.invoke(app, ["curve", "--model", "qwen3-4b", "--store",
                                 str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "qwen3-4b" in lines[0] and "huggingface-cli download" in lines[0]


def test_every_command_has_help():
    for args in (["--help"], ["curve", "--help"], ["models", "list", "--help"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "Usage" in result.output


def test_models_list_json(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    result = runner.invoke(app, ["models", "list", "--json"])
    rows = json.loads(result.output)
    names = {r["name"]: r["status"] for r in rows}
    assert names["qwen3-4b"] == "missing" and "smollm2-135m" in names


def test_import_amb_names_file_line_and_field(tmp_path):
    bad = tmp_path / "amb.jsonl"
    bad.write_text('{"bad": 1}\n')
    result = runner.invoke(app, ["data", "import-amb", str(bad), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2
    assert f"{bad}:1" in result.output and "request" in result.output
    assert not (tmp_path / "o.jsonl").exists()
